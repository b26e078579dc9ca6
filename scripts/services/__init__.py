"""Start and stop the real services tests and benchmarks use (object stores; later a broker).

Each module starts one server as a plain process on 127.0.0.1 with free ports and a temp dir,
waits until it answers, and stops its whole process group: ``seaweedfs`` (S3), ``fake_gcs``
(GCS), ``azurite`` (Azure Blob). ``_common`` holds what they share. Tests import them through
their conftest (``scripts`` is put on ``sys.path``); benchmarks likewise. ``run`` runs one of them
by hand until Ctrl-C (``python scripts/services/run.py fake-gcs --port 4443 --bucket B``), as the
plugins' READMEs show.
"""

"""``tierlog.compaction.spark_session`` and the Spark test fixtures, on real Spark.

The settings are read from tierlog's keys without a JVM. Jobs then run on ``local[2]`` and on a
real standalone cluster (master and worker processes from the pyspark package) and check what a
compaction job relies on: executors run the driver's interpreter and import tierlog from its
virtualenv (they decode record batches with tierlog's code, every codec), a tierlog function
bound with ``functools.partial`` travels by reference, and a function of this test package,
which executors cannot import, travels by value (``register_pickle_by_value``).

Without pyspark or Java, ``spark_session`` raises ``SparkUnavailableError`` saying what is
missing; importing ``tierlog.compaction`` never imports pyspark (checked in a fresh interpreter).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from services.spark import SparkCluster, start_spark_cluster
from services.spark_fixtures import LOCAL_MASTER, STANDALONE_GROUP, SparkSessions

import tierlog
from tierlog.compaction.spark_session import (
    APP_NAME_KEY,
    CONF_PREFIX,
    MASTER_KEY,
    SparkSettings,
    is_loopback_master,
    local_threads,
    spark_session,
)
from tierlog.log.batch import build_batch
from tierlog.log.record import Record
from tierlog.properties import ConfigValueError, parse_long
from tierlog.spi import ConfigError, IllegalStateError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

standalone = pytest.mark.xdist_group(STANDALONE_GROUP)


# Settings ----------------------------------------------------------------------------------------
def test_defaults_without_keys() -> None:
    settings = SparkSettings.from_props({"remote.log.storage.system.enable": "true"})
    assert settings == SparkSettings()
    assert (settings.master, settings.app_name, dict(settings.conf)) == (
        "local[*]",
        "tierlog-compaction",
        {},
    )


def test_keys_are_read_and_spark_keys_passed_through() -> None:
    settings = SparkSettings.from_props(
        {
            MASTER_KEY: " spark://10.0.0.5:7077 ",
            APP_NAME_KEY: "compact-orders",
            CONF_PREFIX + "spark.executor.memory": "2g",
            CONF_PREFIX + "spark.some.future.setting": " x y ",
            "log.cleaner.threads": "2",
        }
    )
    assert settings.master == "spark://10.0.0.5:7077"
    assert settings.app_name == "compact-orders"
    assert dict(settings.conf) == {
        "spark.executor.memory": "2g",
        "spark.some.future.setting": "x y",
    }


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({MASTER_KEY: ""}, f"for configuration {MASTER_KEY}: the master URL is empty"),
        ({MASTER_KEY: "   "}, f"for configuration {MASTER_KEY}: the master URL is empty"),
        ({MASTER_KEY: "local[0]"}, "expected local, local[N], local[*]"),
        ({MASTER_KEY: "local[two]"}, "expected local, local[N], local[*]"),
        ({MASTER_KEY: "local-cluster[2,1]"}, "expected local-cluster[WORKERS,CORES,MEMORY_MB]"),
        ({MASTER_KEY: "spark://host"}, "expected spark://HOST:PORT"),
        ({MASTER_KEY: "spark://a b:7077"}, "a master URL has no blanks"),
        ({MASTER_KEY: 7077}, f"for configuration {MASTER_KEY}: Expected value to be a string"),
        ({APP_NAME_KEY: " "}, f"for configuration {APP_NAME_KEY}: String must be non-empty"),
        (
            {"remote.log.compaction.spark.mastr": "local"},
            f"Unknown configuration remote.log.compaction.spark.mastr (did you mean {MASTER_KEY}?)",
        ),
        (
            {"remote.log.compaction.spark.executor.memory": "2g"},
            f"are {MASTER_KEY}, {APP_NAME_KEY} and {CONF_PREFIX}<spark key>",
        ),
        ({CONF_PREFIX + "executor.memory": "2g"}, "'executor.memory' is not a Spark setting"),
        ({CONF_PREFIX: "x"}, "'' is not a Spark setting"),
        ({CONF_PREFIX + "spark.master": "yarn"}, f"set {MASTER_KEY} instead"),
        ({CONF_PREFIX + "spark.app.name": "x"}, f"set {APP_NAME_KEY} instead"),
        ({CONF_PREFIX + "spark.remote": "sc://h"}, "needs a classic Spark session"),
        ({CONF_PREFIX + "spark.executor.cores": 2}, "spark.executor.cores: Expected value"),
    ],
)
def test_bad_settings_name_the_key(props: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SparkSettings.from_props(props)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[1]",
        "local[*]",
        "local[4,2]",
        "local[*,3]",
        "local-cluster[2,1,1024]",
        "spark://127.0.0.1:7077",
        "spark://h1:7077,h2:7078",
        "spark://[::1]:7077",
        "yarn",
        "k8s://https://kubernetes.example:443",
    ],
)
def test_masters_spark_accepts(master: str) -> None:
    assert SparkSettings.from_props({MASTER_KEY: master}).master == master


def test_settings_built_in_python_are_checked_and_frozen() -> None:
    with pytest.raises(ConfigError, match=MASTER_KEY):
        SparkSettings(master="")
    with pytest.raises(ConfigError, match="not a Spark setting"):
        SparkSettings(conf={"executor.memory": "1g"})
    conf = {"spark.executor.memory": "1g"}
    settings = SparkSettings(conf=conf)
    conf["spark.executor.memory"] = "8g"
    assert settings.conf["spark.executor.memory"] == "1g"
    with pytest.raises(TypeError):
        settings.conf["spark.executor.memory"] = "8g"  # type: ignore[index]


def test_local_threads_and_loopback() -> None:
    assert local_threads("local") == 1
    assert local_threads("local[3]") == 3
    assert local_threads("local[3,2]") == 3
    assert local_threads("local[*]") == (os.cpu_count() or 1)
    assert local_threads("spark://127.0.0.1:7077") is None
    assert local_threads("local-cluster[2,1,1024]") is None
    for master in ("local", "local[*]", "local-cluster[2,1,1024]", "spark://127.0.0.1:7077",
                   "spark://localhost:7077,127.0.0.1:7078", "spark://[::1]:7077"):  # fmt: skip
        assert is_loopback_master(master), master
    for master in ("spark://10.0.0.5:7077", "spark://127.0.0.1:7077,10.0.0.5:7077", "yarn",
                   "k8s://https://127.0.0.1:443"):  # fmt: skip
        assert not is_loopback_master(master), master


def test_spark_conf_defaults_and_overrides() -> None:
    local = SparkSettings(master="local[3]").spark_conf()
    assert local == {
        "spark.api.mode": "classic",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "6",
    }
    everywhere = SparkSettings(master="local[*]").spark_conf()
    assert everywhere["spark.sql.shuffle.partitions"] == str(2 * (os.cpu_count() or 1))
    remote = SparkSettings(master="spark://10.0.0.5:7077").spark_conf()
    assert "spark.driver.host" not in remote
    assert "spark.driver.bindAddress" not in remote
    assert "spark.sql.shuffle.partitions" not in remote
    loopback_cluster = SparkSettings(master="spark://127.0.0.1:7077").spark_conf()
    assert loopback_cluster["spark.driver.host"] == "127.0.0.1"
    assert "spark.sql.shuffle.partitions" not in loopback_cluster
    overridden = SparkSettings(
        master="local[2]",
        conf={
            "spark.ui.enabled": "true",
            "spark.sql.shuffle.partitions": "7",
            "spark.driver.host": "10.0.0.7",
        },
    ).spark_conf()
    assert overridden["spark.ui.enabled"] == "true"
    assert overridden["spark.sql.shuffle.partitions"] == "7"
    assert overridden["spark.driver.host"] == "10.0.0.7"


def test_spark_remote_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost")
    with pytest.raises(ConfigError, match="SPARK_REMOTE is set"):
        spark_session()


# Without the extra, without Java (fresh interpreters) --------------------------------------------
def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_importing_compaction_does_not_import_pyspark() -> None:
    result = _python(
        """
        import sys
        import tierlog.compaction
        import tierlog.compaction.spark_session
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pyarrow", "py4j"))
        print(heavy)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_without_pyspark_the_error_says_what_to_install() -> None:
    result = _python(
        """
        import sys
        sys.modules["pyspark"] = None  # what an environment without tierlog[spark] sees
        from tierlog.compaction.spark_session import (
            SparkUnavailableError, spark_session, stop_spark_session)
        stop_spark_session()  # nothing to stop, no error
        try:
            spark_session()
        except SparkUnavailableError as e:
            print("SparkUnavailableError:", e)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("SparkUnavailableError: Spark is not available")
    assert "pip install 'tierlog[spark]'" in result.stdout


def test_without_java_the_error_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "no-jdk"
    result = _python(
        """
        from tierlog.compaction.spark_session import (
            SparkSettings, SparkUnavailableError, spark_session)
        try:
            spark_session(SparkSettings(master="local[1]"))
        except SparkUnavailableError as e:
            print("SparkUnavailableError:", e)
        """,
        env={"JAVA_HOME": str(missing)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("SparkUnavailableError: Spark's JVM did not start")
    assert f"JAVA_HOME={missing}" in result.stdout


# Jobs ------------------------------------------------------------------------------------------
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _batches() -> list[tuple[int, bytes]]:
    """One batch per codec, 50 records each, offsets continuing from batch to batch."""
    out = []
    for index, codec in enumerate(_CODECS):
        base = 50 * index
        records = [
            Record(base + i, 1_700_000_000_000 + i, f"k{(base + i) % 17}".encode(), b"v" * i, ())
            for i in range(50)
        ]
        out.append((base, build_batch(records, base_offset=base, compression=codec)))
    return out


def _decode_on_executor(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: decode each batch with tierlog (CRC checked) and say where and with
    what this ran. Defined in the test package, which executors cannot import: it travels by
    value, and the tierlog modules it imports are imported by the executor."""
    import os
    import sys

    import pyarrow as pa

    import tierlog
    from tierlog.log.batch import decode_batch

    for batch in batches:
        rows: dict[str, list[object]] = {
            "base": [], "count": [], "keys": [], "pid": [], "python": [], "tierlog": [],
        }  # fmt: skip
        for data in batch.column("data").to_pylist():
            header, records = decode_batch(data)
            rows["base"].append(header.base_offset)
            rows["count"].append(len(records))
            rows["keys"].append(",".join((r.key or b"").decode() for r in records))
            rows["pid"].append(os.getpid())
            rows["python"].append(sys.executable)
            rows["tierlog"].append(tierlog.__file__)
        yield pa.RecordBatch.from_pydict(rows)


@pytest.fixture
def by_value() -> Iterator[None]:
    """Pickle this module's functions by value while a test runs (executors import tierlog,
    not ``tests``)."""
    from pyspark import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


def _check_executors_run_tierlog(spark: SparkSession) -> set[int]:
    """Run the decode job on ``spark``; returns the pids of the Python workers that ran it."""
    batches = _batches()
    frame = spark.createDataFrame(batches, "base long, data binary").repartition(4)
    rows = frame.mapInArrow(
        _decode_on_executor,
        "base long, count long, keys string, pid long, python string, tierlog string",
    ).collect()
    assert sorted((row["base"], row["count"]) for row in rows) == [(b, 50) for b, _ in batches]
    for row in rows:
        expected = ",".join(f"k{o % 17}" for o in range(row["base"], row["base"] + 50))
        assert row["keys"] == expected
    assert {row["python"] for row in rows} == {sys.executable}
    assert {row["tierlog"] for row in rows} == {tierlog.__file__}
    pids = {int(row["pid"]) for row in rows}
    assert os.getpid() not in pids
    return pids


def _check_partial_by_reference(spark: SparkSession) -> None:
    """A tierlog function bound with functools.partial runs on executors, imported from the
    installed tierlog: its error comes back with tierlog's type, message and file."""
    from pyspark import cloudpickle
    from pyspark.errors import PythonException

    parse = functools.partial(parse_long, "segment.bytes")
    payload = cloudpickle.dumps(parse)
    assert b"tierlog.properties" in payload
    assert b"parse_long" in payload
    assert b"_parse_integer" not in payload  # by value, parse_long's globals would come along
    numbers = spark.sparkContext.parallelize([" 1", "2 ", "-3", "4"], 2).map(parse).collect()
    assert numbers == [1, 2, -3, 4]
    with pytest.raises(PythonException) as caught:
        spark.sparkContext.parallelize(["5", "6_000"], 2).map(parse).collect()
    text = str(caught.value)
    assert (
        f"{ConfigValueError.__module__}.{ConfigValueError.__name__}: Invalid value '6_000' for "
        "configuration segment.bytes: Not a number of type LONG"
    ) in text
    assert str(Path(tierlog.__file__).parent / "properties.py") in text


@pytest.mark.spark
def test_local_session_settings(spark_local: SparkSession, spark_sessions: SparkSessions) -> None:
    context = spark_local.sparkContext
    assert context.master == LOCAL_MASTER
    assert context.appName == "tierlog-tests"
    conf = context.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"
    assert context.uiWebUrl is None
    assert spark_local.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark_local.conf.get("spark.sql.shuffle.partitions") == "4"
    assert "-XX:TieredStopAtLevel=1" in (conf.get("spark.driver.extraJavaOptions") or "")
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    # The running session is joined on the same master, refused on another one.
    assert spark_session(spark_sessions.settings(LOCAL_MASTER)) is spark_local
    with pytest.raises(IllegalStateError, match=re.escape(f"on master {LOCAL_MASTER} is")):
        spark_session(SparkSettings(master="local[1]"))
    assert spark_local.range(100).count() == 100


@pytest.mark.spark
def test_local_executors_run_tierlog(spark_local: SparkSession, by_value: None) -> None:
    _check_executors_run_tierlog(spark_local)
    _check_partial_by_reference(spark_local)


@pytest.mark.spark
@standalone
def test_standalone_executors_run_tierlog(
    spark_standalone: SparkSession, spark_standalone_cluster: SparkCluster, by_value: None
) -> None:
    assert spark_standalone.sparkContext.master == spark_standalone_cluster.url
    _check_executors_run_tierlog(spark_standalone)
    _check_partial_by_reference(spark_standalone)
    # The tasks ran in an executor the worker started: its application directory has its log.
    app_id = spark_standalone.sparkContext.applicationId
    work = spark_standalone_cluster.workers[0].directory / "work" / app_id
    assert sorted(p.name for p in work.iterdir()), f"no executor directory under {work}"
    assert any((executor / "stderr").is_file() for executor in work.iterdir())


@pytest.mark.spark
@standalone
def test_sessions_switch_between_masters(
    spark_sessions: SparkSessions, spark_standalone_url: str
) -> None:
    local = spark_sessions.get(LOCAL_MASTER)
    assert local.range(10).count() == 10
    starts = spark_sessions.starts
    remote = spark_sessions.get(spark_standalone_url)
    assert spark_sessions.get(spark_standalone_url) is remote
    assert spark_sessions.starts == starts + 1
    assert remote.sparkContext.master == spark_standalone_url
    assert remote.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"] == 499500
    assert local.sparkContext._jsc is None  # the local session was stopped for it
    again = spark_sessions.get(LOCAL_MASTER)
    assert again.range(5).count() == 5
    # A test that stops the session itself leaves nothing broken for the next one.
    again.stop()
    assert spark_sessions.get(LOCAL_MASTER).range(3).count() == 3


def _executor_pids(app_id: str) -> set[int]:
    """PIDs of the executor JVMs of application ``app_id`` (from /proc)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and (
            app_id.encode() in argv
        ):
            pids.add(int(entry.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.spark
def test_cluster_of_two_workers_stops_with_its_executors(
    tmp_path: Path, spark_sessions: SparkSessions
) -> None:
    started = time.monotonic()
    cluster = start_spark_cluster(tmp_path, workers=2, worker_cores=1, worker_memory="1g")
    try:
        assert cluster.url.startswith("spark://127.0.0.1:")
        assert cluster.exited() is None
        spark = spark_sessions.get(cluster.url)
        assert spark.sparkContext.parallelize(range(4), 4).map(lambda x: x * x).sum() == 14
        # The master gives the application an executor on each one-core worker.
        tracker = spark.sparkContext._jsc.sc().statusTracker()  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while len(tracker.getExecutorInfos()) < 3 and time.monotonic() < deadline:  # + driver
            time.sleep(0.1)
        app_id = spark.sparkContext.applicationId
        executors = _executor_pids(app_id)
        assert len(executors) == 2, executors
        for index in (1, 2):
            assert (tmp_path / f"worker-{index}" / "work" / app_id).is_dir()
    finally:
        cluster.stop()
    assert all(service.process.poll() is not None for service in cluster)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in executors) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in executors), "executors outlived their worker"
    spark_sessions.stop()
    assert time.monotonic() - started < 180

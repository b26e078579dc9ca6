"""Kafka's Java client properties, as librdkafka (confluent-kafka) understands them.

A broker's ``server.properties`` configures TBRLMM's producer, consumer and admin client with
Java client keys (``remote.log.metadata.common.client.security.protocol=SASL_SSL``, a
``sasl.jaas.config`` line, a JKS truststore...). librdkafka shares most names with the Java
client, so those pass through unchanged, and librdkafka itself refuses a key it does not know
when the client is created (``TopicBasedRemoteLogMetadataManager.configure`` reports that as a
``ConfigError`` naming the key). What differs is translated here, so the same file works:

- ``sasl.jaas.config``: ``PlainLoginModule`` and ``ScramLoginModule`` (``username="..."
  password="..."``) become ``sasl.username``/``sasl.password``; ``Krb5LoginModule``
  (``keyTab``, ``principal``) becomes ``sasl.kerberos.keytab``/``sasl.kerberos.principal``;
  ``OAuthBearerLoginModule`` with ``clientId``/``clientSecret`` (OIDC client credentials) becomes
  ``sasl.oauthbearer.method=oidc`` with ``sasl.oauthbearer.client.id``/``.client.secret``
  (and ``.scope``). Any other login module is a ``ConfigError``.
- TLS stores: librdkafka reads PEM files and PKCS#12 keystores, not Java KeyStores. A PEM
  truststore (``ssl.truststore.type=PEM``) becomes ``ssl.ca.location`` (or ``ssl.ca.pem`` for
  ``ssl.truststore.certificates``); a PKCS12 keystore keeps ``ssl.keystore.location`` and
  ``ssl.keystore.password``; a PEM keystore becomes ``ssl.certificate.location`` and
  ``ssl.key.location`` (or ``ssl.certificate.pem``/``ssl.key.pem`` for the inline
  ``ssl.keystore.certificate.chain``/``ssl.keystore.key``). A JKS store (the Java default type)
  or a PKCS12 truststore is a ``ConfigError`` naming the key and saying how to convert it.
  ``ssl.endpoint.identification.algorithm=`` (empty: no host name check) becomes ``none``.
- A few keys have another name (``receive.buffer.bytes`` -> ``socket.receive.buffer.bytes``,
  ``send.buffer.bytes`` -> ``socket.send.buffer.bytes``, ``max.request.size`` ->
  ``message.max.bytes``, ``fetch.max.wait.ms`` -> ``fetch.wait.max.ms``, ``buffer.memory`` in
  bytes -> ``queue.buffering.max.kbytes``).
- Keys only the Java client has (serializers, ``client.dns.lookup``, metric reporters, JCA
  provider settings, ...) are dropped with a WARNING naming them: they configure the JVM's
  client, and have no effect on what is written or read.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tierlog.spi import ConfigError

__all__ = ["JAVA_ONLY_KEYS", "RENAMED_KEYS", "TranslatedClientConfig", "translate"]

_LOG = logging.getLogger(__name__)

RENAMED_KEYS: Final[Mapping[str, str]] = {
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "max.request.size": "message.max.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
}
"""Java client key -> librdkafka key, for the same setting under another name."""

JAVA_ONLY_KEYS: Final = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "client.dns.lookup",
        "interceptor.classes",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.recording.level",
        "metrics.sample.window.ms",
        "auto.include.jmx.reporter",
        "partitioner.class",
        "partitioner.ignore.keys",
        "partitioner.adaptive.partitioning.enable",
        "partitioner.availability.timeout.ms",
        "max.block.ms",
        "max.poll.records",
        "exclude.internal.topics",
        "default.api.timeout.ms",
        "metadata.max.idle.ms",
        "security.providers",
        "ssl.provider",
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
        "ssl.engine.factory.class",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "sasl.login.class",
        "sasl.client.callback.handler.class",
        "sasl.login.callback.handler.class",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms",
        "sasl.login.retry.backoff.ms",
        "sasl.login.retry.backoff.max.ms",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.ticket.renew.window.factor",
    }
)
"""Keys of the Java clients that librdkafka has no counterpart for: dropped with a WARNING.
``ssl.cipher.suites`` is among them because Java names suites the IANA way and OpenSSL its own
way; the same list would be refused at the first connection."""

_JAAS_MODULE: Final = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b")
_JAAS_OPTION: Final = re.compile(r'([\w.]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')
_STORE_TYPES: Final = ("JKS", "PKCS12", "PEM")


@dataclass(frozen=True, slots=True)
class TranslatedClientConfig:
    """librdkafka properties and what the translation noticed."""

    properties: dict[str, str] = field(repr=False)
    """librdkafka keys and values (secrets included: kept out of ``repr``)."""
    dropped: tuple[str, ...] = ()
    """The Java-only keys that were dropped (as the user wrote them, prefix included)."""


def _jaas_options(text: str, key: str) -> tuple[str, dict[str, str]]:
    """The login module's class name and its options, from a ``sasl.jaas.config`` value."""
    match = _JAAS_MODULE.match(text)
    if match is None:
        raise ConfigError(
            f"{key}: cannot read the JAAS configuration (expected '<LoginModule class> required "
            'option="value" ...;\')'
        )
    options: dict[str, str] = {}
    for name, raw in _JAAS_OPTION.findall(text[match.end() :]):
        value = raw[1:-1] if raw.startswith('"') else raw
        options[name] = re.sub(r"\\(.)", r"\1", value)
    return match.group(1), options


def _translate_jaas(text: str, key: str) -> dict[str, str]:
    module, options = _jaas_options(text, key)
    short = module.rsplit(".", 1)[-1]

    def need(*names: str) -> list[str]:
        missing = [n for n in names if n not in options]
        if missing:
            raise ConfigError(f"{key}: {short} needs {' and '.join(missing)}")
        return [options[n] for n in names]

    if short in ("PlainLoginModule", "ScramLoginModule"):
        username, password = need("username", "password")
        return {"sasl.username": username, "sasl.password": password}
    if short == "Krb5LoginModule":
        result = {}
        if "keyTab" in options:
            result["sasl.kerberos.keytab"] = options["keyTab"]
        if "principal" in options:
            result["sasl.kerberos.principal"] = options["principal"]
        return result
    if short == "OAuthBearerLoginModule" and "clientId" in options:
        client_id, client_secret = need("clientId", "clientSecret")
        result = {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": client_id,
            "sasl.oauthbearer.client.secret": client_secret,
        }
        if "scope" in options:
            result["sasl.oauthbearer.scope"] = options["scope"]
        return result
    raise ConfigError(
        f"{key}: the login module {module} cannot be translated for librdkafka; tierlog "
        "translates PlainLoginModule, ScramLoginModule, Krb5LoginModule and "
        "OAuthBearerLoginModule with clientId/clientSecret"
    )


def _store_type(props: Mapping[str, str], key: str, where: Mapping[str, str]) -> str:
    value = props.get(key, "JKS").strip().upper() or "JKS"
    if value not in _STORE_TYPES:
        raise ConfigError(
            f"{where.get(key, key)}={value}: expected one of {', '.join(_STORE_TYPES)}"
        )
    return value


def _translate_tls(props: dict[str, str], out: dict[str, str], where: Mapping[str, str]) -> None:
    """Move the Java TLS store keys of ``props`` into librdkafka's keys in ``out``."""
    truststore_type = _store_type(props, "ssl.truststore.type", where)
    keystore_type = _store_type(props, "ssl.keystore.type", where)
    props.pop("ssl.truststore.type", None)
    props.pop("ssl.keystore.type", None)
    props.pop("ssl.truststore.password", None)  # PEM truststores have none
    location = props.pop("ssl.truststore.location", None)
    if location:
        if truststore_type != "PEM":
            key = where.get("ssl.truststore.location", "ssl.truststore.location")
            raise ConfigError(
                f"{key}={location} is a {truststore_type} truststore"
                f"{' (the Java default type)' if truststore_type == 'JKS' else ''}, which "
                "librdkafka cannot read: convert it to PEM (keytool -exportcert -rfc, or openssl "
                "pkcs12 -nokeys) and set ssl.truststore.type=PEM"
            )
        out["ssl.ca.location"] = location
    certificates = props.pop("ssl.truststore.certificates", None)
    if certificates:
        out["ssl.ca.pem"] = certificates
    location = props.pop("ssl.keystore.location", None)
    if location:
        if keystore_type == "JKS":
            key = where.get("ssl.keystore.location", "ssl.keystore.location")
            raise ConfigError(
                f"{key}={location} is a JKS keystore (the Java default type), which librdkafka "
                "cannot read: convert it to PKCS12 (keytool -importkeystore -deststoretype "
                "PKCS12) and set ssl.keystore.type=PKCS12, or to PEM files"
            )
        if keystore_type == "PKCS12":
            out["ssl.keystore.location"] = location
        else:
            out["ssl.certificate.location"] = location
            out["ssl.key.location"] = location
    password = props.pop("ssl.keystore.password", None)
    if password is not None and keystore_type == "PKCS12":
        out["ssl.keystore.password"] = password
    chain = props.pop("ssl.keystore.certificate.chain", None)
    if chain:
        out["ssl.certificate.pem"] = chain
    key_pem = props.pop("ssl.keystore.key", None)
    if key_pem:
        out["ssl.key.pem"] = key_pem
    algorithm = props.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.strip() or "none"


def translate(
    props: Mapping[str, str], where: Mapping[str, str] | None = None
) -> TranslatedClientConfig:
    """``props`` (Java client keys, prefix stripped) as librdkafka properties.

    ``where`` maps a key of ``props`` to the key as the user wrote it (with its
    ``remote.log.metadata.*.`` prefix), for messages. Raises ``ConfigError`` for what
    librdkafka cannot be given (a JKS store, an unknown login module); Java-only keys are
    returned in ``dropped`` for the caller to report.
    """
    names = dict(where or {})
    remaining = dict(props)
    out: dict[str, str] = {}
    dropped = sorted(names.get(k, k) for k in remaining if k in JAVA_ONLY_KEYS)
    for key in JAVA_ONLY_KEYS:
        remaining.pop(key, None)
    jaas = remaining.pop("sasl.jaas.config", None)
    if jaas is not None and jaas.strip():
        out.update(_translate_jaas(jaas, names.get("sasl.jaas.config", "sasl.jaas.config")))
    _translate_tls(remaining, out, names)
    memory = remaining.pop("buffer.memory", None)
    if memory is not None:
        try:
            kbytes = -(-int(memory.strip()) // 1024)
        except ValueError:
            raise ConfigError(
                f"{names.get('buffer.memory', 'buffer.memory')} must be a number of bytes, "
                f"got {memory!r}"
            ) from None
        out["queue.buffering.max.kbytes"] = str(max(kbytes, 1))
    for key, value in remaining.items():
        out[RENAMED_KEYS.get(key, key)] = value
    return TranslatedClientConfig(out, tuple(dropped))

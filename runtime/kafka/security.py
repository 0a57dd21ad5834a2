"""How a Kafka job logs in to its brokers: ``systems.<name>.security.protocol`` and the SASL and
SSL keys, turned into the keyword arguments every aiokafka client of the job takes (consumers,
producers, transactional producers, the group member, the admin client, the brokers' watch, the
Spark source's readers and writers): one function, ``kafka_security``, serves them all.

A secret (``sasl.password``, ``ssl.key.password``) is given as it is, or as ``env:VAR`` (the
environment variable ``VAR`` of the process that connects) or ``file:PATH`` (the file's text,
without its trailing newline: a mounted Kubernetes Secret). It is read when the job starts and
never written anywhere: ``samza-dsl config``, the plan's renderings and every message show
``***`` or the reference (``samza_dsl.config.shown_value``).

A broker that refuses the job is one line naming the broker and what failed
(``refusal``): a wrong password, an unknown user or mechanism, a certificate the CA does not
trust, a TLS listener spoken to in plain text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from samza_dsl.config import SASL_MECHANISMS, SECURITY_PROTOCOLS, secret_value
from samza_dsl.errors import AccessRefused, ConfigError
from samza_dsl.jobconfig import SystemConfig

__all__ = ["KafkaSecurity", "kafka_security", "security_settings", "refusal", "check_login",
           "SECURITY_KWARGS", "LoginRefused", "not_authorized"]

#: the aiokafka keyword arguments this module sets
SECURITY_KWARGS = ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
                   "sasl_plain_password")


class LoginRefused(AccessRefused):
    """The brokers refused the job's connection: its credentials or its trust."""


def not_authorized(what: str, servers: str, exc: BaseException,
                   user: str | None = None) -> AccessRefused | None:
    """The one line of a broker refusing the job's user an operation (aiokafka's topic, group,
    cluster or transactional-id authorization errors): the user logged in, and may not do
    ``what``. Not retried. None for any other error."""
    from aiokafka.errors import (
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailed,
    )

    grants: list[tuple[type[BaseException], str, str]] = [
        (TopicAuthorizationFailedError, "topic", "Describe, Read and Write on it (and Create "
         "where the job makes its topics)"),
        (GroupAuthorizationFailedError, "consumer group", "Read and Describe on it"),
        (ClusterAuthorizationFailedError, "the cluster", "the cluster operations the job "
         "needs (Create for its topics, IdempotentWrite for its producers)"),
        (TransactionalIdAuthorizationFailed, "transactional id", "Write and Describe on it "
         "(on the job's prefix, for every task)")]
    found = [(resource, needs) for kind, resource, needs in grants if isinstance(exc, kind)]
    if not found:
        return None
    resource, needs = found[0]
    named = str(exc).rpartition(": ")[2].strip()  # aiokafka: "[Error 29] ...: <resource>"
    if named and not named.startswith("[") and resource != "the cluster":
        resource = f"{resource} {named!r}"
    who = f"user {user!r}" if user else "the job's user"
    return AccessRefused(
        f"{what} on Kafka at {servers} was refused: {who} is not authorized for {resource} "
        f"({type(exc).__name__}); the brokers accepted the login, so its password is not at "
        f"fault: grant {who} {needs} (an ACL), and run again (a refusal is not retried)",
        user=user)


@dataclass(frozen=True)
class KafkaSecurity:
    """A system's security settings, resolved (secrets read). Picklable (a Spark executor
    builds its own clients from it); ``settings()`` makes the aiokafka keyword arguments."""

    system: str
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: where the password came from, for messages: "systems.kafka.sasl.password (env X)"
    password_from: str = ""
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def key(self, prop: str) -> str:
        return f"systems.{self.system}.{prop}"

    def settings(self) -> dict[str, Any]:
        """aiokafka keyword arguments (none for PLAINTEXT): a new SSL context each call."""
        if self.protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            out["ssl_context"] = self.ssl_context()
        if self.sasl:
            out.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                       sasl_plain_password=self.password)
        return out

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context: the CA of ``ssl.cafile`` (else the system's), and the client's
        own certificate where ``ssl.certfile`` gives one."""
        try:
            context = ssl.create_default_context(cafile=self.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"config {self.key('ssl.cafile')}={self.cafile!r}: no CA "
                              f"certificate could be read from it ({_why(exc)}); give a PEM "
                              f"file of the CA that signed the brokers' certificates") from None
        context.check_hostname = self.check_hostname
        if self.certfile:
            try:
                context.load_cert_chain(self.certfile, self.keyfile or None,
                                        password=self.key_password)
            except (OSError, ssl.SSLError) as exc:
                keyfile = f" with {self.key('ssl.keyfile')}={self.keyfile!r}" \
                    if self.keyfile else ""
                raise ConfigError(
                    f"config {self.key('ssl.certfile')}={self.certfile!r}{keyfile}: the client "
                    f"certificate and its key could not be loaded ({_why(exc)}); check the "
                    f"files and {self.key('ssl.key.password')}") from None
        return context


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _secret(key: str, value: Any) -> tuple[str, str]:
    """(the secret, where it came from) of ``value``: as given, ``env:VAR`` or ``file:PATH``
    (``samza_dsl.config.secret_value``)."""
    text = str(value)
    where = (f"{key} (env {text[4:].strip()})" if text.startswith("env:") else
             f"{key} (file {text[5:].strip()})" if text.startswith("file:") else key)
    return secret_value(key, value), where


def kafka_security(system: SystemConfig, own: Mapping[str, Any] | None = None) -> KafkaSecurity:
    """The security of Kafka system ``system``: its keys in the job's config over those its
    descriptor (``KafkaSystem(..., **{"security.protocol": ...})``) gives in ``own``.

    >>> from samza_dsl.jobconfig import SystemConfig
    >>> kafka_security(SystemConfig("kafka")).settings()
    {}
    >>> kafka_security(SystemConfig("kafka"), {"sasl.username": "app"})
    Traceback (most recent call last):
    ...
    samza_dsl.errors.ConfigError: config systems.kafka.sasl.username is set, but systems.kafka.security.protocol is PLAINTEXT: ...
    """
    props = system.properties
    under = own or {}

    def get(prop: str) -> Any:
        # the one reader of a system's security keys as given: what is wrong with one is said
        # here, in its own words
        value = props.get(prop)
        if value is None:
            value = under.get(prop)
        return None if value is None or str(value).strip() == "" else value

    def key(prop: str) -> str:
        return f"systems.{system.name}.{prop}"

    protocol = str(get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"config {key('security.protocol')}={get('security.protocol')!r} is "
                          f"not a protocol: use one of {', '.join(SECURITY_PROTOCOLS)}")
    sasl = protocol.startswith("SASL_")
    tls = protocol.endswith("SSL")
    given = [p for p in ("sasl.mechanism", "sasl.username", "sasl.password") if get(p)]
    if given and not sasl:
        raise ConfigError(f"config {key(given[0])} is set, but {key('security.protocol')} is "
                          f"{protocol}: set it to SASL_SSL (or SASL_PLAINTEXT) to log in, or "
                          f"remove the SASL keys")
    given = [p for p in ("ssl.cafile", "ssl.certfile", "ssl.keyfile", "ssl.key.password")
             if get(p)]
    if given and not tls:
        raise ConfigError(f"config {key(given[0])} is set, but {key('security.protocol')} is "
                          f"{protocol}: set it to SASL_SSL or SSL to use TLS, or remove the SSL "
                          f"keys")
    mechanism = username = password = None
    password_from = ""
    if sasl:
        mechanism = str(get("sasl.mechanism") or "SCRAM-SHA-512").strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"config {key('sasl.mechanism')}={get('sasl.mechanism')!r} is "
                              f"not supported: use one of {', '.join(SASL_MECHANISMS)}")
        missing = [key(p) for p in ("sasl.username", "sasl.password") if not get(p)]
        if missing:
            raise ConfigError(f"config {key('security.protocol')}={protocol} logs in with "
                              f"SASL, but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                              f"not set; give the user and its password (env:VAR or file:PATH)")
        username = str(get("sasl.username")).strip()
        password, password_from = _secret(key("sasl.password"), get("sasl.password"))
    key_password = None
    if get("ssl.key.password"):
        key_password, _ = _secret(key("ssl.key.password"), get("ssl.key.password"))
    if get("ssl.keyfile") and not get("ssl.certfile"):
        raise ConfigError(f"config {key('ssl.keyfile')} is set without {key('ssl.certfile')}: "
                          f"give the client certificate too")
    for prop in ("ssl.cafile", "ssl.certfile", "ssl.keyfile"):
        path = get(prop)
        if path and not os.path.isfile(str(path)):
            raise ConfigError(f"config {key(prop)}={str(path)!r}: no such file (looked from "
                              f"{os.getcwd()})")
    check = str(get("ssl.check.hostname") or "true").strip().lower()
    if check not in ("true", "false"):
        raise ConfigError(f"config {key('ssl.check.hostname')}={check!r} is not a boolean: use "
                          f"true or false")
    security = KafkaSecurity(
        system.name, protocol, mechanism, username, password, password_from,
        cafile=str(get("ssl.cafile")) if get("ssl.cafile") else None,
        certfile=str(get("ssl.certfile")) if get("ssl.certfile") else None,
        keyfile=str(get("ssl.keyfile")) if get("ssl.keyfile") else None,
        key_password=key_password, check_hostname=check == "true")
    if tls:
        security.ssl_context()  # a file that is not a CA or a key is a ConfigError now
    return security


def security_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The security keyword arguments of a client's ``settings`` (a consumer's, say), for
    another client of the same job (an admin client, a producer)."""
    return {k: settings[k] for k in SECURITY_KWARGS if k in settings}


def _servers(servers: str) -> list[tuple[str, int]]:
    out = []
    for entry in servers.split(","):
        host, _, port = entry.strip().rpartition(":")
        with contextlib.suppress(ValueError):
            out.append((host.strip("[]"), int(port)))
    return out


def _describe(exc: BaseException, where: str, settings: Mapping[str, Any],
              security: KafkaSecurity | None) -> str | None:
    """One line for a refused login, or None when ``exc`` is not one."""
    from aiokafka.errors import (
        KafkaConnectionError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
    )

    def key(prop: str, fallback: str) -> str:
        return security.key(prop) if security is not None else fallback

    user = settings.get("sasl_plain_username")
    mechanism = settings.get("sasl_mechanism")
    protocol = settings.get("security_protocol", "PLAINTEXT")
    if isinstance(exc, SaslAuthenticationFailed):
        source = security.password_from if security is not None and security.password_from \
            else key("sasl.password", "the SASL password")
        return (f"SASL authentication ({mechanism}) failed for user {user!r} at {where}: the "
                f"broker refused the credentials; check {key('sasl.username', 'the user')} and "
                f"{source}")
    if isinstance(exc, UnsupportedSaslMechanismError):
        return (f"the broker at {where} does not accept SASL mechanism {mechanism} "
                f"({exc}); set {key('sasl.mechanism', 'sasl_mechanism')} to one it enables")
    if isinstance(exc, ssl.SSLCertVerificationError):
        ca = security.cafile if security is not None and security.cafile else None
        trust = (f"the CA of {key('ssl.cafile', 'ssl.cafile')} ({ca})" if ca
                 else "this machine's default CAs (no ssl.cafile is given)")
        reason = getattr(exc, "verify_message", "") or _why(exc)  # foreign: the ssl module's
        return (f"TLS: the certificate of the broker at {where} is not trusted by {trust}: "
                f"{reason}; give the CA that signed it in {key('ssl.cafile', 'ssl.cafile')}")
    if protocol in ("SSL", "SASL_SSL") and isinstance(exc, ConnectionResetError | ssl.SSLEOFError):
        return (f"TLS: the broker at {where} closed the connection in the TLS handshake: its "
                f"listener may not speak TLS; check {key('security.protocol', 'security_protocol')}"
                f" (now {protocol}) and that {where} is the brokers' TLS listener")
    if isinstance(exc, ssl.SSLError):
        return (f"TLS with the broker at {where} failed ({_why(exc)}); check that its listener "
                f"speaks TLS and {key('security.protocol', 'security_protocol')}")
    if isinstance(exc, KafkaConnectionError) and protocol in ("PLAINTEXT", "SASL_PLAINTEXT") \
            and isinstance(exc.__cause__ or exc.__context__, asyncio.IncompleteReadError):
        return (f"the broker at {where} closed the connection at once: its listener may ask "
                f"for TLS or SASL; set {key('security.protocol', 'security_protocol')} "
                f"(now {protocol}) to the listener's protocol")
    return None


async def refusal(servers: str, settings: Mapping[str, Any],
                  security: KafkaSecurity | None = None, timeout: float = 5.0) -> str | None:
    """Why the brokers at ``servers`` refuse a client of ``settings``, in one line naming the
    broker (the first that answers with a refusal), or None when a connection logs in, or none
    answers at all (that is not a refusal: the caller says the brokers are unreachable)."""
    from runtime.kafka.aiokafka_compat import create_conn

    aiokafka_log = logging.getLogger("aiokafka")
    level = aiokafka_log.level
    aiokafka_log.setLevel(logging.CRITICAL)
    try:
        for host, port in _servers(servers):
            try:
                async with asyncio.timeout(timeout):
                    conn = await create_conn(
                        host, port, request_timeout_ms=int(timeout * 1000),
                        **security_settings(settings))
                conn.close()
                return None
            except Exception as exc:
                line = _describe(exc, f"{host}:{port}", settings, security)
                if line is not None and isinstance(exc, ConnectionResetError):
                    # a reset may be a broker going down just then: a refusal happens twice
                    await asyncio.sleep(0.2)
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(timeout):
                            conn = await create_conn(
                                host, port, request_timeout_ms=int(timeout * 1000),
                                **security_settings(settings))
                        conn.close()
                        return None
                if line is not None:
                    return line
    finally:
        aiokafka_log.setLevel(level)
    return None


async def check_login(servers: str, settings: Mapping[str, Any],
                      security: KafkaSecurity | None = None, timeout: float = 5.0) -> None:
    """Raise ``LoginRefused`` with ``refusal``'s line when the brokers refuse the settings (a
    plain-text client too: its listener may want TLS); one connection to the first broker that
    answers."""
    line = await refusal(servers, settings, security, timeout)
    if line is not None:
        raise LoginRefused(line)

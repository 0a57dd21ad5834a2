"""A secured Apache Kafka broker for tests: its clients' listener speaks SASL_SSL (TLS with a
certificate signed by a certificate authority made for it, SCRAM-SHA-512 logins), as production
brokers ask; the controller and the broker's own traffic stay on listeners of their own.

    with SecuredKafkaBroker() as broker:
        broker.add_user("app", "app-secret")        # AlterUserScramCredentials, as an admin
        broker.bootstrap                            # "127.0.0.1:PORT", SASL_SSL only
        broker.ca_file                              # the CA a client trusts

``SecuredKafkaBroker(authorizer=True)`` also checks ACLs: its users may do only what ``allow``
grants them (the CreateAcls request, as ``kafka-acls --add`` sends it).

The certificates are made with the ``openssl`` command at each start, in the broker's folder:
a CA (``ca.pem``), the broker's key and certificate for ``127.0.0.1`` and ``localhost`` signed
by it (``broker.pem``, read by Kafka as a PEM keystore), and a second CA that signed nothing
(``other-ca.pem``: a client that trusts only it refuses the broker). The admin user's SCRAM
credentials are written when the log dir is formatted (``kafka-storage format --add-scram``);
``add_user`` creates the others through the admin API (the AlterUserScramCredentials request,
as Kafka's ``kafka-configs --alter --entity-type users`` sends it).

The inter-broker listener is PLAINTEXT on a port of its own (one node talks to itself only),
and is advertised only to connections that arrive on it: a client that bootstraps from
``bootstrap`` is told the SASL_SSL address alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .apache_kafka import ApacheKafkaBroker
from .kafka_broker import HOST, KafkaBrokerError, answers, free_port, log_tail

__all__ = ["SecuredKafkaBroker", "make_certificates", "ADMIN_USER"]

#: the broker's admin user (SCRAM-SHA-512), written into the formatted log dir
ADMIN_USER = "samza-admin"
_ADMIN_PASSWORD = "admin-" + "test-bed-only"
_MECHANISM = "SCRAM-SHA-512"
_ITERATIONS = 4096


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise KafkaBrokerError("no openssl command on this machine: the secured broker makes its "
                               "certificates with it (apt-get install openssl)")
    done = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise KafkaBrokerError(f"openssl {args[0]} failed: {done.stderr.strip()[-1000:]}")


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, the broker's key and certificate signed by it (for 127.0.0.1 and localhost), and a
    second CA that signed nothing, as PEM files in ``folder``: ``ca``, ``broker`` (the key in
    PKCS#8, then the certificate), ``other_ca``."""
    folder.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{name}-key.pem", "-out", f"{name}.pem",
                 "-days", "2", "-subj", f"/CN=samza-dsl test {name}", cwd=folder)
    _openssl("req", *ec, "-keyout", "broker-key.pem", "-out", "broker.csr",
             "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
             "-CAcreateserial", "-out", "broker-cert.pem", "-days", "2", "-extfile", "san.ext",
             cwd=folder)
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker-key.pem", "-out", "broker-pk8.pem",
             cwd=folder)
    (folder / "broker.pem").write_text((folder / "broker-pk8.pem").read_text()
                                       + (folder / "broker-cert.pem").read_text())
    return {"ca": folder / "ca.pem", "broker": folder / "broker.pem",
            "other_ca": folder / "other-ca.pem"}


class SecuredKafkaBroker(ApacheKafkaBroker):
    """One Apache Kafka node whose clients' listener is SASL_SSL with SCRAM-SHA-512 (module
    docstring). ``bootstrap`` is that listener; ``ca_file`` the CA its certificate chains to;
    ``admin`` the admin user's (name, password)."""

    def __init__(self, *, settings: Mapping[str, Any] | None = None,
                 start_timeout: float = 60.0, stop_timeout: float = 20.0,
                 root: str | os.PathLike[str] | None = None, authorizer: bool = False) -> None:
        if authorizer:  # users may do only what ACLs allow (``allow``); the admin, and the
            # broker itself on its plain-text listeners, anything
            settings = {"authorizer.class.name":
                        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "super.users": f"User:{ADMIN_USER};User:ANONYMOUS", **(settings or {})}
        super().__init__(settings=settings, start_timeout=start_timeout,
                         stop_timeout=stop_timeout, root=root)
        self._internal: dict[int, int] = {}
        self.certificates: dict[str, Path] = {}
        self.admin = (ADMIN_USER, _ADMIN_PASSWORD)

    @property
    def ca_file(self) -> Path:
        return self.certificates["ca"]

    @property
    def other_ca_file(self) -> Path:
        return self.certificates["other_ca"]

    @property
    def plaintext_bootstrap(self) -> str:
        """The broker's own PLAINTEXT listener (inter-broker traffic): for tests of a TLS client
        pointed at a listener without TLS."""
        return f"{HOST}:{self._internal_port(self.nodes[0])}"

    def _internal_port(self, node: Any) -> int:
        return self._internal.setdefault(node.node_id, free_port())

    def _properties(self, node: Any) -> dict[str, Any]:
        props = super()._properties(node)
        internal = f"INTERNAL://{HOST}:{self._internal_port(node)}"
        controller = f"CONTROLLER://{HOST}:{node.controller_port}"
        secured = f"SASL_SSL://{HOST}:{node.port}"
        keystore = self.certificates.get("broker", node.dir / "certs" / "broker.pem")
        props.update({
            "listeners": f"{secured},{internal},{controller}",
            "advertised.listeners": f"{secured},{internal},{controller}",
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map":
                "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": _MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
            "listener.name.sasl_ssl.ssl.client.auth": "none",
        })
        props.update(self.settings)
        return props

    def _write_config(self, node: Any) -> None:
        self.certificates = make_certificates(node.dir / "certs")
        super()._write_config(node)

    #: its own templates, which hold the admin user
    template_prefix = "formatted-secured"

    def _format_args(self) -> list[str]:
        return ["--add-scram", f"{_MECHANISM}=[name={ADMIN_USER},password={_ADMIN_PASSWORD}]"]

    def _wait(self, node: Any, deadline: float) -> None:
        internal = f"{HOST}:{self._internal_port(node)}"
        while time.monotonic() < deadline:
            if node.proc is not None and node.proc.poll() is not None:
                raise KafkaBrokerError(
                    f"the secured Apache Kafka node exited with code {node.proc.returncode}; "
                    f"log {node.log}, last lines:\n{log_tail(node.log)}")
            if answers(internal):
                return
            time.sleep(0.2)
        raise KafkaBrokerError(f"the secured Apache Kafka node did not answer on {internal} "
                               f"within {self.start_timeout:g} s; last lines of its log:\n"
                               f"{log_tail(node.log)}")

    def client_settings(self, user: str | None = None, password: str | None = None,
                        ca_file: Path | None = None) -> dict[str, Any]:
        """aiokafka keyword arguments that log in as ``user`` (the admin by default)."""
        name, secret = (user, password) if user is not None else self.admin
        context = ssl.create_default_context(cafile=str(ca_file or self.ca_file))
        return {"security_protocol": "SASL_SSL", "ssl_context": context,
                "sasl_mechanism": _MECHANISM, "sasl_plain_username": name,
                "sasl_plain_password": secret}

    def allow(self, user: str, grants: list[tuple[str, str, str]]) -> None:
        """Grant user ``user`` each ``(resource type, name, operation)`` of ``grants``
        (``("topic", "*", "describe")``, ``("group", "*", "all")``): for a broker made with
        ``authorizer=True``, whose users may do nothing else."""
        asyncio.run(self._allow(user, grants))

    async def _admin_request(self, request: Any) -> Any:
        """The answer of a broker to one admin ``request``, sent as the admin user."""
        from aiokafka import AIOKafkaClient

        client = AIOKafkaClient(bootstrap_servers=self.bootstrap, **self.client_settings())
        await client.bootstrap()
        try:
            return await client.send(client.get_random_node(), request)
        finally:
            await client.close()

    async def _allow(self, user: str, grants: list[tuple[str, str, str]]) -> None:
        from .acl_request import CreateAclsRequest

        answer = await self._admin_request(CreateAclsRequest(user, grants))
        for result in answer.results:
            if result[0]:
                raise KafkaBrokerError(f"creating ACLs of {user!r} failed: error "
                                       f"{result[0]} {result[1]}")

    def add_user(self, name: str, password: str, timeout: float = 30.0) -> None:
        """Create (or change) SCRAM-SHA-512 user ``name`` through the admin API, and wait until
        it can log in."""
        asyncio.run(self._add_user(name, password, timeout))

    async def _add_user(self, name: str, password: str, timeout: float) -> None:
        from aiokafka.conn import create_conn

        from .scram_request import AlterUserScramCredentialsRequest

        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, _ITERATIONS)
        answer = await self._admin_request(AlterUserScramCredentialsRequest(
            name, 2, _ITERATIONS, salt, salted))  # mechanism 2: SCRAM-SHA-512
        for result in answer.results:
            if result[1]:
                raise KafkaBrokerError(f"creating SCRAM user {name!r} failed: error "
                                       f"{result[1]} {result[2]}")
        # the credential reaches the broker through the metadata log: wait until it logs in
        quiet = logging.getLogger("aiokafka")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    conn = await create_conn(HOST, self.port,
                                             **self.client_settings(name, password))
                    conn.close()
                    return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        finally:
            quiet.setLevel(level)


"""A throwaway PostgreSQL server for the tests, started and stopped by the tests themselves.

The tuner shares one Optuna study between worker processes through Optuna's ``RDBStorage``;
its tests need a real server, and CI has no services. This module finds PostgreSQL's server
binaries, initialises a fresh cluster in a new temporary folder, starts it on 127.0.0.1 on a
free port (trust authentication, no fsync), and stops it with ``pg_ctl stop -m immediate``
when the session ends, whether the tests passed or not.

Fixtures (registered by ``tests/conftest.py``):

``postgres_server``  (session) the running :class:`PostgresServer`; ``create_database()``
                     makes a new empty database and returns its URL.
``postgres_url``     (session) the URL of one database made for the session, shared by every
                     test that asks for it: give each study a name of its own.
``postgres_fresh_url`` (function) the URL of a new, empty database for one test.

URLs look like ``postgresql+psycopg2://ktune@127.0.0.1:PORT/DB`` and go as they are to
``optuna.storages.RDBStorage`` or ``sqlalchemy.create_engine``, in this process or in any
process started from it.

Where the binaries (or the psycopg2 driver) are missing the tests that use these fixtures
are skipped with the way to install them; with ``CI=true`` in the environment they fail
instead, since CI must run them.

PostgreSQL refuses to run as root. Run as root, the cluster's files belong to an unprivileged
account and every PostgreSQL program runs under it (``subprocess`` drops the user, group and
supplementary groups in the child, so neither ``runuser`` nor ``setpriv`` is needed): the
``postgres`` account where the system has one (Debian's package makes it), else ``nobody``.
Nothing is added to the system's accounts.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import NoReturn

import pytest

BINARIES = ("initdb", "pg_ctl", "postgres")
# Debian and Ubuntu install each major version's server programs in DEBIAN_ROOT/<version>/bin, off PATH.
DEBIAN_ROOT = Path("/usr/lib/postgresql")
# Set to a folder holding initdb, pg_ctl and postgres to use those before any other.
BINDIR_ENV = "KTUNE_PG_BINDIR"

SUPERUSER = "ktune"
HOST = "127.0.0.1"
START_ATTEMPTS = 3
INSTALL_HINT = ("install PostgreSQL's server programs: 'apt-get install postgresql' on Debian or "
                "Ubuntu (any distribution's 'postgresql' server package, or Homebrew's, works), "
                f"or point {BINDIR_ENV} at the folder holding initdb, pg_ctl and postgres")
DRIVER_HINT = "install the psycopg2 driver: pip install -e '.[dev]' (or pip install psycopg2-binary)"

_SETTINGS = {
    "listen_addresses": HOST,
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "32MB",
    "jit": "off",
}


class PostgresUnavailable(Exception):
    """The environment lacks something the server needs: a skip locally, a failure in CI."""


class PostgresStartError(RuntimeError):
    """initdb or the server failed: a real failure everywhere."""


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test with ``reason``; fail it instead where ``CI`` is ``true``."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"PostgreSQL is needed in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _version_key(bindir: Path) -> tuple[int, ...]:
    # .../postgresql/15/bin -> (15,); .../postgresql/9.6/bin -> (9, 6)
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name))


def _has_binaries(folder: Path) -> bool:
    return all((folder / name).is_file() and os.access(folder / name, os.X_OK) for name in BINARIES)


def find_bindir() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres: $KTUNE_PG_BINDIR, PATH, then the newest
    /usr/lib/postgresql/*/bin; None where there is none."""
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    on_path = shutil.which("initdb")
    if on_path:
        # A link on PATH (say /usr/local/bin/initdb) may point into a folder with the others.
        candidates += [Path(on_path).parent, Path(on_path).resolve().parent]
    debian = [initdb.parent for initdb in DEBIAN_ROOT.glob("*/bin/initdb")]
    candidates += sorted(debian, key=_version_key, reverse=True)
    return next((folder for folder in candidates if _has_binaries(folder)), None)


@dataclass(frozen=True)
class Account:
    """The unprivileged account PostgreSQL runs under when the tests run as root."""

    name: str
    uid: int
    gid: int


def service_account(preferred: tuple[str, ...] = ("postgres", "nobody")) -> Account | None:
    """None when not root (PostgreSQL then runs as the current user); else the first existing,
    non-root account of ``preferred``."""
    if os.geteuid() != 0:
        return None
    for name in preferred:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return Account(name, entry.pw_uid, entry.pw_gid)
    raise PostgresUnavailable(f"running as root and none of the accounts {', '.join(preferred)} exists to "
                              "run PostgreSQL under (it refuses to run as root); run the tests as another "
                              "user, or install PostgreSQL's package, which adds the 'postgres' account")


def _reachable(path: Path, account: Account) -> bool:
    """Whether ``account`` may enter every folder above ``path`` (the permission bits only)."""
    for folder in path.parents:
        mode = folder.stat()
        if mode.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif mode.st_gid == account.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not mode.st_mode & bit:
            return False
    return True


def _make_base(account: Account | None) -> Path:
    """A new, empty folder for the cluster, the socket and the log, owned by ``account``.

    Under the system's temporary folder rather than pytest's: pytest's is private to root, where
    the account could not enter it, and short paths keep the socket's name under the kernel's
    limit of 107 bytes."""
    if account is None:
        return Path(tempfile.mkdtemp(prefix="ktune-pg-"))
    roots = list(dict.fromkeys([tempfile.gettempdir(), "/tmp"]))
    for root in roots:
        base = Path(tempfile.mkdtemp(prefix="ktune-pg-", dir=root))
        if _reachable(base, account):
            os.chown(base, account.uid, account.gid)
            return base
        shutil.rmtree(base, ignore_errors=True)
    raise PostgresUnavailable(f"the account {account.name!r} cannot enter any of {roots} "
                              "to run PostgreSQL there; set TMPDIR to a folder it can enter")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _conf_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _child_env() -> dict[str, str]:
    # PG* variables of the caller (PGDATA, PGPORT, PGOPTIONS...) must not steer this server.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


@dataclass
class PostgresServer:
    """A running server; ``url(db)`` for a database, ``create_database()`` for a new one."""

    bindir: Path
    base: Path
    account: Account | None
    port: int = 0
    startup_seconds: float = 0.0
    _databases: int = field(default=0, repr=False)

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "socket"

    @property
    def log(self) -> Path:
        return self.base / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://{SUPERUSER}@{HOST}:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (``name``, else a new one of the form ``ktune_N``); its URL."""
        import sqlalchemy

        if name is None:
            self._databases += 1
            name = f"ktune_{self._databases}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"database name {name!r}: lower-case letters, digits and '_' only")
        engine = sqlalchemy.create_engine(self.url(), isolation_level="AUTOCOMMIT",
                                          poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect() as connection:
                connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url(name)

    # -- running PostgreSQL's programs --------------------------------------------------------

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        account = self.account
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            cwd=self.base, env=_child_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout, check=False,
            user=account.uid if account else None, group=account.gid if account else None,
            extra_groups=[] if account else None,
        )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def _fail(self, what: str, result: subprocess.CompletedProcess[str], *, log: bool) -> PostgresStartError:
        detail = f"{what} exited {result.returncode}\n{result.stdout}{result.stderr}"
        if log:
            detail += f"\n--- server log ({self.log}) ---\n{self._log_tail()}"
        return PostgresStartError(detail)

    def start(self) -> None:
        started = time.perf_counter()
        self.socket_dir.mkdir(mode=0o700)
        if self.account:
            os.chown(self.socket_dir, self.account.uid, self.account.gid)
        result = self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                           "--encoding=UTF8", "--locale=C", "--no-sync")
        if result.returncode != 0:
            raise self._fail("initdb", result, log=False)
        settings = {**_SETTINGS, "unix_socket_directories": str(self.socket_dir)}
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/postgres.py\n")
            conf.writelines(f"{key} = {_conf_string(value)}\n" for key, value in settings.items())
        for attempt in range(1, START_ATTEMPTS + 1):
            # The port is free when asked for, but another process may take it before the
            # server binds it: then try again with another.
            self.port = free_port()
            result = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", f"-p {self.port}",
                               "-w", "-t", "30", "start")
            if result.returncode == 0:
                break
            if attempt == START_ATTEMPTS or "could not bind" not in self._log_tail():
                raise self._fail("pg_ctl start", result, log=True)
        self.startup_seconds = time.perf_counter() - started

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the server at once (no checkpoint: the data are thrown away)."""
        pid = self._postmaster_pid()
        if pid is None:
            return
        try:
            result = self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop",
                               timeout=40)
            stopped = result.returncode == 0
        except subprocess.TimeoutExpired:
            stopped = False
        if not stopped:
            # SIGQUIT is the immediate shutdown pg_ctl would have asked for.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)


def requirements(account: Account | None = None) -> tuple[Path, Account | None]:
    """The folder of the server programs, and the account to run them as (``account``, else
    ``service_account()``); raises :class:`PostgresUnavailable` naming what is missing."""
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(f"PostgreSQL's server programs ({', '.join(BINARIES)}) were found neither "
                                  f"on PATH nor in {DEBIAN_ROOT}/*/bin; {INSTALL_HINT}")
    if find_spec("psycopg2") is None:
        raise PostgresUnavailable(f"no psycopg2 module; {DRIVER_HINT}")
    return bindir, account or service_account()


def require_postgres(account: Account | None = None) -> None:
    """Skip the calling test (fail it with ``CI=true``) unless a server can be started."""
    try:
        requirements(account)
        return
    except PostgresUnavailable as exc:
        reason = str(exc)
    unavailable(reason)


@contextlib.contextmanager
def running_server(account: Account | None = None) -> Iterator[PostgresServer]:
    """Start a server in a new folder, yield it, then stop it and delete the folder (also when the
    body raised). ``account``: whom to run PostgreSQL as when root (default: ``service_account()``)."""
    bindir, account = requirements(account)
    base = _make_base(account)
    server = PostgresServer(bindir=bindir, base=base, account=account)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One server for the whole session, started when a test first asks for it."""
    require_postgres()
    with running_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """A database for the session; tests share it, so each study needs a name of its own."""
    return postgres_server.create_database("ktune")


@pytest.fixture
def postgres_fresh_url(postgres_server: PostgresServer) -> str:
    """A new, empty database for one test."""
    return postgres_server.create_database()

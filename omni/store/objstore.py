"""Results on an S3 object store: ``--results s3://bucket/prefix``.

:class:`S3Path` has the few pathlib methods omni's results code uses (``/``,
``name``, ``glob``, ``exists``, ``read_text``, ``write_text``...), so the
store, retractions, manifests, calibrations and summaries take a local
directory or a bucket alike. Listing and reading go through pyarrow's C++ S3
filesystem (multi-threaded, what Parquet datasets read with); the one write
that must never replace anything, :meth:`S3Path.put_once`, is a conditional
PUT (``If-None-Match: *``): the server refuses it with 412 when the key
exists, even when two writers race (tested against SeaweedFS, which omni's
stack runs). Objects are never renamed: S3 has no atomic rename, and a PUT is
already all-or-nothing, so no temp object is needed.

Endpoint and credentials: the usual AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``) when set,
else the stack's ``.env`` (``omni stack up`` writes it and serves the bucket).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from omni.errors import OmniError
from omni.host.cache import user_cache

SCHEME = "s3://"


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None  # None: AWS itself
    access_key: str
    secret_key: str = field(repr=False)
    region: str

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options: ``pd.read_parquet(uri, storage_options=...)``."""
        client = {"region_name": self.region, **({"endpoint_url": self.endpoint_url} if self.endpoint_url else {})}
        return {"key": self.access_key, "secret": self.secret_key, "client_kwargs": client}


_AWS_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


def s3_settings() -> S3Settings:
    """Where s3:// results live and the keys to them: AWS variables, else the stack's .env."""
    from omni.fleet import stack

    dotenv = stack.ENV_FILE.stat().st_mtime_ns if stack.ENV_FILE.exists() else None
    return _settings(tuple(os.environ.get(n) for n in _AWS_VARS), dotenv)


@functools.lru_cache(maxsize=8)
def _settings(aws: tuple[str | None, ...], _dotenv_mtime: int | None) -> S3Settings:
    """:func:`s3_settings`, once per AWS variables and version of .env (every
    s3:// path asks, and reading .env parses docker-compose.yml)."""
    env = dict(zip(_AWS_VARS, aws))
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return S3Settings(
            env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL_S3"),
            env["AWS_ACCESS_KEY_ID"],
            env["AWS_SECRET_ACCESS_KEY"],
            env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        )
    from omni.fleet import stack

    found = stack.s3_settings()
    if found is None:
        raise OmniError(
            "s3:// results need an endpoint and credentials: run `omni stack up` (it serves S3 and writes them "
            "to .env), or set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL"
        )
    return S3Settings(found["endpoint_url"], found["access_key"], found["secret_key"], found["region"])


@functools.lru_cache(maxsize=4)
def _filesystems(settings: S3Settings) -> tuple[Any, Any]:
    """(pyarrow S3FileSystem, s3fs filesystem), made once per settings."""
    import pyarrow.fs as pafs
    import s3fs

    endpoint, scheme = settings.endpoint_url, "https"
    if endpoint:
        scheme, _, endpoint = endpoint.partition("://")
    arrow = pafs.S3FileSystem(
        access_key=settings.access_key,
        secret_key=settings.secret_key,
        region=settings.region,
        endpoint_override=endpoint,
        scheme=scheme,
        connect_timeout=5,
        request_timeout=60,
    )
    # its own instance: s3fs caches listings per instance, and one shared with
    # the caller's pandas would keep listing what was there before our PUTs
    return arrow, s3fs.S3FileSystem(**settings.storage_options(), skip_instance_cache=True, use_listings_cache=False)


class S3Path:
    """``s3://bucket/key`` with pathlib's manners: ``/`` joins, ``glob`` lists,
    and two paths are equal when their URIs are."""

    __slots__ = ("bucket", "key", "settings")

    def __init__(self, uri: str, settings: S3Settings | None = None):
        if not uri.startswith(SCHEME):
            raise OmniError(f"{uri!r} is not an s3:// address")
        bucket, _, key = uri[len(SCHEME) :].partition("/")
        if not bucket:
            raise OmniError(f"{uri!r} names no bucket: use s3://BUCKET/PREFIX, e.g. s3://omni-results/nightly")
        self.bucket, self.key = bucket, key.strip("/")
        self.settings = settings or s3_settings()

    # -- pure path manners
    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Path) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: S3Path) -> bool:
        return str(self) < str(other)

    def __truediv__(self, part: str | PurePosixPath) -> S3Path:
        key = "/".join(p for p in (self.key, str(part).strip("/")) if p)
        return S3Path(f"{SCHEME}{self.bucket}/{key}", self.settings)

    @property
    def _pure(self) -> PurePosixPath:
        return PurePosixPath("/", self.key)

    name = property(lambda self: self._pure.name)
    stem = property(lambda self: self._pure.stem)
    suffix = property(lambda self: self._pure.suffix)

    @property
    def parent(self) -> S3Path:
        return S3Path(f"{SCHEME}{self.bucket}/{str(self._pure.parent).lstrip('/')}", self.settings)

    def relative_to(self, other: S3Path) -> PurePosixPath:
        return self._pure.relative_to(other._pure)

    def resolve(self) -> S3Path:
        return self

    def is_absolute(self) -> bool:
        return True

    def as_uri(self) -> str:
        return str(self)

    # -- what pyarrow needs
    @property
    def filesystem(self):
        return _filesystems(self.settings)[0]

    @property
    def fs_path(self) -> str:
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    # -- the object store
    def _info(self):
        try:
            return self.filesystem.get_file_info(self.fs_path).type
        except OSError as err:
            raise _unreachable(self, err) from None

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self._info() != pafs.FileType.NotFound

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return self._info() == pafs.FileType.File

    def require_bucket(self) -> None:
        """Refuse a bucket that does not exist (some servers, SeaweedFS among
        them, would make one on the first PUT: a typo would file results
        where nobody looks)."""
        import pyarrow.fs as pafs

        try:
            kind = self.filesystem.get_file_info(self.bucket).type
        except OSError as err:
            raise _unreachable(self, err) from None
        if kind != pafs.FileType.Directory:
            raise OmniError(
                f"{self}: bucket {self.bucket!r} does not exist at {self.settings.endpoint_url or 'AWS'}; "
                "fix the name, or create it (omni stack up creates omni-results)"
            )

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to make: a prefix exists once an object is under it."""

    def listing(self) -> list[tuple[str, bool]]:
        """(path relative to this prefix, is a file) of everything under it."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.fs_path, recursive=True, allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as err:
            raise _unreachable(self, err) from None
        start = len(self.fs_path) + 1
        return [(i.path[start:], i.type == pafs.FileType.File) for i in infos]

    def glob(self, pattern: str) -> list[S3Path]:
        """pathlib's glob for ``*``/``?``/``[...]`` per path part (no ``**``)."""
        wanted = pattern.split("/")
        found = []
        for rel, _is_file in self.listing():
            parts = rel.split("/")
            if len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted)):
                found.append(self / rel)
        return sorted(found)

    def open_input(self):
        try:
            return self.filesystem.open_input_file(self.fs_path)
        except FileNotFoundError:
            raise
        except OSError as err:
            if "not found" in str(err).lower() or "does not exist" in str(err).lower():
                raise FileNotFoundError(str(self)) from None
            raise _unreachable(self, err) from None

    def read_bytes(self) -> bytes:
        with self.open_input() as source:
            return source.read()

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes) -> None:
        """A plain PUT, replacing what is there: for derived views (summaries)
        only; results go through :meth:`put_once`."""
        try:
            with self.filesystem.open_output_stream(self.fs_path) as sink:
                sink.write(data)
        except OSError as err:
            raise _unreachable(self, err) from None

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def put_once(self, data: bytes, attempts: int = 3) -> None:
        """PUT with ``If-None-Match: *``; FileExistsError when the key exists
        (412). A 409 (AWS: another conditional write of the key in flight) is
        asked again: the second answer says who won."""
        client = _filesystems(self.settings)[1]
        for attempt in range(attempts):
            try:
                client.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=data, IfNoneMatch="*")
                return
            except OSError as err:
                text = str(err).lower()
                if "pre-condition" in text or "precondition" in text or "412" in text:
                    raise FileExistsError(str(self)) from None
                if ("conditionalrequestconflict" not in text and "409" not in text) or attempt == attempts - 1:
                    raise _unreachable(self, err) from None
                time.sleep(0.2 * (attempt + 1))

    def move_aside(self, target: S3Path) -> None:
        """Copy then delete: not atomic, only ever used on objects no reader counts."""
        client = _filesystems(self.settings)[1]
        client.copy(f"{self.bucket}/{self.key}", f"{target.bucket}/{target.key}")
        client.rm_file(f"{self.bucket}/{self.key}")


def _unreachable(path: S3Path, err: Exception) -> OmniError:
    where = path.settings.endpoint_url or "AWS"
    return OmniError(
        f"{path}: the object store at {where} failed ({err}); is it up (omni stack status) and does bucket "
        f"{path.bucket!r} exist? Credentials come from AWS_* variables or .env"
    )


ResultsPath = Path | S3Path


def results_root(results: str | Path | S3Path) -> ResultsPath:
    """A results location: a local directory (made absolute) or ``s3://bucket/prefix``."""
    if isinstance(results, S3Path) or (isinstance(results, Path) and results.is_absolute()):
        return results  # already a location (called per file: resolve() costs a syscall per part)
    text = str(results)
    if text.startswith(SCHEME):
        return S3Path(text)
    if "://" in text:
        raise OmniError(f"results {text!r}: give a directory or s3://BUCKET/PREFIX (no other scheme is supported)")
    return Path(text).resolve()


def local_scratch(results: str | Path | S3Path) -> Path:
    """A local directory for what a run needs on disk (the engine's arm.json,
    result.json, engine.log): the results directory itself, or for s3://
    results ``$OMNI_LOCAL_DIR/BUCKET/PREFIX`` (default the user's cache,
    ``~/.cache/omni/local``: never the directory a worker happens to start in)."""
    root = results_root(results)
    if isinstance(root, S3Path):
        return user_cache("local", "OMNI_LOCAL_DIR").resolve() / root.bucket / root.key
    return root


def local_copy(results: str | Path | S3Path, path: ResultsPath) -> Path:
    """``path`` on local disk (for what reads only files: a spec): itself, or
    an S3 object fetched under :func:`local_scratch`."""
    if not isinstance(path, S3Path):
        return path
    root = results_root(results)
    local = local_scratch(root) / str(path.relative_to(root))
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(path.read_bytes())
    return local


def write_text_once(path: ResultsPath, text: str) -> None:
    """A small text file (manifest, spec copy, calibration), whole or not at
    all; one that exists already stays as it is."""
    if isinstance(path, S3Path):
        try:
            path.put_once(text.encode())
        except FileExistsError:
            pass
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def arrow_source(path: ResultsPath) -> tuple[str, Any]:
    """(path, filesystem) for pyarrow's readers: a local path needs none."""
    if isinstance(path, S3Path):
        return path.fs_path, path.filesystem
    return str(path), None


def storage_options(results: str | Path | S3Path | None = None) -> dict[str, Any] | None:
    """What ``pd.read_parquet`` needs to read these results: None for a
    directory, else the keys and endpoint (omni's own without ``results``)."""
    if results is None:
        return s3_settings().storage_options()
    root = results_root(results)
    return root.settings.storage_options() if isinstance(root, S3Path) else None


__all__ = [
    "ResultsPath",
    "S3Path",
    "S3Settings",
    "arrow_source",
    "local_copy",
    "local_scratch",
    "results_root",
    "write_text_once",
    "s3_settings",
    "storage_options",
]

"""The package's PEP 517 build backend: builds the wheel (and sdist) of this pure-Python package
straight into the folder pip gives, and writes nothing beside the sources (setuptools would leave
build/ and hoop.egg-info/ in the source tree). It needs nothing installed, so pip works offline.
Metadata comes from pyproject.toml's [project] table."""
import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "hoop"


def _project():
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p.get("description", "")]
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    if "text" in p.get("license", {}):
        lines.append("License: " + p["license"]["text"])
    for dep in p.get("dependencies", []):
        lines.append("Requires-Dist: " + dep)
    for extra, deps in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        lines += ["Requires-Dist: %s; extra == \"%s\"" % (d, extra) for d in deps]
    readme = p.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(_ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return p, ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _sources():
    """The package's modules, as (path in the archive, path on disk)."""
    d = os.path.join(_ROOT, _PACKAGE)
    return [(_PACKAGE + "/" + n, os.path.join(d, n)) for n in sorted(os.listdir(d))
            if n.endswith(".py")]


def _dist_info(p):
    return "%s-%s.dist-info" % (p["name"], p["version"])


def _entry_points(p):
    """entry_points.txt of the [project.entry-points] tables, or None."""
    groups = p.get("entry-points", {})
    if not groups:
        return None
    text = ""
    for group, points in sorted(groups.items()):
        text += "[%s]\n" % group + "".join("%s = %s\n" % kv for kv in sorted(points.items()))
        text += "\n"
    return text.encode("utf-8")


def _wheel(directory, files):
    """Writes a py3-none-any wheel of files ((archive path, bytes) pairs) plus its dist-info."""
    p, meta = _metadata()
    info = _dist_info(p)
    files = list(files) + [
        (info + "/METADATA", meta),
        (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: hoop_backend\nRoot-Is-Purelib: true\n"
                          b"Tag: py3-none-any\n"),
    ]
    entry_points = _entry_points(p)
    if entry_points:
        files.append((info + "/entry_points.txt", entry_points))
    record = []
    name = "%s-%s-py3-none-any.whl" % (p["name"], p["version"])
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append("%s,sha256=%s,%d" % (arc, digest.decode(), len(data)))
        record.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(arc, _read(path)) for arc, path in _sources()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file that puts the source folder on sys.path: edits take effect without reinstalling.
    return _wheel(wheel_directory, [(_PACKAGE + "_editable.pth", (_ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    members = [("pyproject.toml", os.path.join(_ROOT, "pyproject.toml")),
               ("README.md", os.path.join(_ROOT, "README.md")),
               ("_build/hoop_backend.py", os.path.abspath(__file__))] + _sources()
    _, meta = _metadata()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, path in members:
            t.add(path, arcname=base + "/" + arc)
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(meta)
        t.addfile(ti, io.BytesIO(meta))
    return name

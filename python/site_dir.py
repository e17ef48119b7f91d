"""Prints the directory this interpreter imports packages from under PREFIX (argv[1]).

One of site.getsitepackages() directly under PREFIX/lib* when there is one (Debian's
/usr/local/lib/python3.11/dist-packages for /usr/local), else the posix_prefix scheme's purelib
(PREFIX/lib/pythonX.Y/site-packages), which needs PYTHONPATH.
"""
import os
import site
import sys
import sysconfig

prefix = os.path.normpath(os.path.abspath(sys.argv[1]))
for d in site.getsitepackages():
    rel = os.path.relpath(os.path.normpath(d), prefix)
    if rel.split(os.sep)[0] in ("lib", "lib64"):
        print(os.path.join(prefix, rel))
        break
else:
    print(sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))

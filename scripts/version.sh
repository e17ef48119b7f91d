#!/bin/sh
# Prints the version from include/hoop.h, its one place (meson.build's project version reads it).
cd "$(dirname "$0")/.." || exit 1
awk '/^#define HOOP_VERSION_(MAJOR|MINOR|PATCH) / { v[$2] = $3 }
     END { printf "%s.%s.%s\n", v["HOOP_VERSION_MAJOR"], v["HOOP_VERSION_MINOR"], v["HOOP_VERSION_PATCH"] }' include/hoop.h

#!/usr/bin/env bash
# Builds a Debian trixie root holding Ceph's radosgw, ceph-mon and ceph-osd (18.2) for the
# S3 contract tests against RGW: bookworm's radosgw is 16.2, and trixie's packages need
# trixie's libraries, so they live in a chroot of their own. ~70 s here, ~700 MB.
# Usage: build-rgw.sh OUT   (OUT/usr/bin/radosgw exists afterwards; OUT.log has the
# installers' output)
set -euo pipefail
out=${1:?usage: build-rgw.sh OUT}
if [[ -x $out/usr/bin/radosgw && -x $out/usr/bin/ceph-osd && -x $out/usr/bin/ceph-mon ]]; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
rm -rf "$out.partial"
mkdir -p "$(dirname "$out")"
debootstrap --variant=minbase trixie "$out.partial" http://deb.debian.org/debian >"$out.log" 2>&1
# Keeps the packages' maintainer scripts from starting daemons during the install.
printf '#!/bin/sh\nexit 101\n' >"$out.partial/usr/sbin/policy-rc.d"
chmod +x "$out.partial/usr/sbin/policy-rc.d"
chroot "$out.partial" apt-get update -qq >>"$out.log" 2>&1
chroot "$out.partial" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends radosgw ceph-mon ceph-osd ceph-common >>"$out.log" 2>&1
chroot "$out.partial" apt-get clean
mv "$out.partial" "$out"

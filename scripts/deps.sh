#!/usr/bin/env bash
# Installs what building and testing libccl needs on a fresh Debian machine with Rust:
# a C compiler, OpenMPI (mpirun, mpicc), iproute2 (network namespaces), binutils (nm, readelf).
set -euo pipefail
need=()
command -v gcc >/dev/null || need+=(gcc)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
command -v ip >/dev/null || need+=(iproute2)
command -v nm >/dev/null || need+=(binutils)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "deps: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

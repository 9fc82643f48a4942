"""The one shell function every cloud-init script installs packages with (``pkg_install NAME...``): apt-get on
Debian and Ubuntu images (an ``apt-get update`` only when the first try fails), dnf on Amazon Linux. Kept apart so
:mod:`stacks.cloud_init` and :mod:`stacks.slurm_boot` share it without importing each other."""

PKG_INSTALL = """pkg_install() {
  if command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"; }
  else dnf install -y -q "$@"; fi
}
"""
"""``pkg_install()``: the shell function's definition, to put at the top of a script."""

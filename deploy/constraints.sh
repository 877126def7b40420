#!/bin/sh
# Regenerates deploy/constraints.txt from the tested environment (the repository's .venv, after `make
# install` and a green test run), from the repository root:
#   sh deploy/constraints.sh
# What it does: `pip freeze --all --exclude-editable` (the platform itself is installed editable and is not
# pinned; --all keeps setuptools and wheel, which the image's packages require, and pip itself is dropped:
# the base image's), minus anything that is not a PyPI release (direct references, `name @ url`), with torch's local
# version label dropped (`torch==2.13.0+cpu` -> `torch==2.13.0`: PEP 440 ignores a candidate's local label
# when the pin has none, so the same file lets deploy/Dockerfile install the CPU build or, with a CUDA
# TORCH_INDEX_URL, the +cuXXX build of the same version). tests/unit/test_deploy_observability.py checks
# that the file pins every package the image installs at the version installed here.
set -eu
out=deploy/constraints.txt
{
  echo "# Constraints for deploy/Dockerfile (pip install -c deploy/constraints.txt ...): every package of the"
  echo "# tested environment at the version the tests passed with, so two builds of one commit install the same"
  echo "# packages. Generated from .venv by"
  echo "#   .venv/bin/pip freeze --all --exclude-editable  (minus pip and direct references, torch's +cpu label dropped)"
  echo "# Regenerate after changing dependencies (and passing the tests): sh deploy/constraints.sh"
  .venv/bin/pip freeze --all --exclude-editable --disable-pip-version-check \
    | grep -v ' @ ' \
    | grep -v '^pip==' \
    | grep -v '^-e ' \
    | sed -E 's/^(torch[A-Za-z0-9_.-]*==[^+;[:space:]]+)\+[A-Za-z0-9.]+/\1/' \
    | LC_ALL=C sort -f
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(grep -vc '^#' "$out") pins)"

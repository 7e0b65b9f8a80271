"""The repository root is the package: ComfyUI imports it by folder name, pip installs it as `mizuoto`."""
from setuptools import find_packages, setup

setup(
    packages=["mizuoto"] + [f"mizuoto.{p}" for p in find_packages(".", exclude=["tests*", "bench*"])],
    package_dir={"mizuoto": "."},
)

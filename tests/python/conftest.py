"""pytest setup: the package of the build under test (FEDLGC_BUILD_DIR, default build/)
comes first on the import path."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("FEDLGC_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
sys.path.insert(0, os.path.join(os.path.abspath(BUILD), "python"))
sys.path.insert(0, HERE)

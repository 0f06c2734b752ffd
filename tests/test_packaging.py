"""What a `pip install .` carries: every data file the package reads at run time is declared in setup.cfg's
package_data, so an installed npumon (not only a checkout) finds its rules, fault catalogue, scenarios and the
simulated libdcmi.so's sources."""

import configparser
import fnmatch
import os

from paths import REPO

PACKAGE = os.path.join(REPO, "npumon")


def declared_patterns():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    patterns = []
    for package, value in config["options.package_data"].items():
        directory = package.replace(".", os.sep)
        patterns += [os.path.join(directory, pattern.strip()) for pattern in value.replace("\n", ",").split(",")
                     if pattern.strip()]
    return patterns


def data_files():
    found = []
    for directory, subdirectories, files in os.walk(PACKAGE):
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        found += [os.path.relpath(os.path.join(directory, name), REPO) for name in files
                  if not name.endswith((".py", ".pyc"))]
    return sorted(found)


def test_every_data_file_of_the_package_is_installed_with_it():
    patterns = declared_patterns()
    missing = [path for path in data_files() if not any(fnmatch.fnmatch(path, pattern) for pattern in patterns)]
    assert data_files(), "no data files found: the walk is wrong"
    assert missing == [], "not in setup.cfg [options.package_data]: {}".format(missing)

"""setup.cfg holds the metadata; this file adds one step to building the package.

The portal's Turkish (and any other language's) catalogues are compiled from
locales/<lang>/LC_MESSAGES/*.po, which are not inside the package, into
llmgw/portal/locales/, which git ignores. build.py compiled them, so a
`pip install .` or a wheel built without it showed a Turkish browser English
(issue 25). build_py now compiles them into what it builds, with the same code
build.py runs (llmgw/portal/catalogues.py, Babel's), loaded from its file so
that building needs none of llmgw's other dependencies: pyproject.toml names
Babel among the build's requirements.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _catalogues():
    spec = importlib.util.spec_from_file_location("llmgw_build_catalogues", HERE / "llmgw/portal/catalogues.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCatalogues(build_py):
    """build_py, then each language's catalogue compiled into the package being built."""

    def run(self):
        super().run()
        catalogues = _catalogues()
        if not catalogues.languages():
            raise SystemExit(f"llmgw: {catalogues.SOURCE} has no language's catalogues, so the package would "
                             "show English only; build from a checkout or an sdist, which carry locales/")
        # An editable install runs from the checkout, where i18n.py reads llmgw/portal/locales/ itself.
        target = catalogues.TARGET if self.editable_mode else Path(self.build_lib) / "llmgw/portal/locales"
        for lang, n in catalogues.compile_all(catalogues.SOURCE, target).items():
            print(f"llmgw: compiled {n} {lang} sentences into {target / lang}")


setup(cmdclass={"build_py": BuildWithCatalogues})

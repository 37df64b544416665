# setup.cfg holds everything; this file lets older pips install in editable mode.
from setuptools import setup

setup()

"""Helpers the GPU tier's tests import (a module of its own name: `from conftest import` finds
whichever conftest was loaded last when several test folders run in one session)."""
import sys


def child(env, *args):
    """The command line of a child running `python args...` with the tier's interpreter."""
    return [env.get("HAMI_TEST_PYTHON", sys.executable), *args]

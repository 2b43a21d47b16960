from .base import *  # noqa
from . import arithmetic  # noqa

"""A study's storage that waits out a transient outage: a database server restarted, a connection
dropped, an SQLite file locked. Each storage call that fails for such a reason is retried, with
growing pauses, for up to RETRY_S seconds (AUTOTUNE_STORAGE_RETRY_S), saying so on stderr; then the
outage is one line, exit
2. A
refusal that waiting cannot mend (a wrong password, a missing database) is not retried. Optuna has
no retry of its own; its RDB storage turns every SQLAlchemy error into StorageInternalError
("invalid data in the commit"), whose cause says what really happened."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna

RETRY_S = 120.0
PERMANENT = (
    "authentication failed",
    "does not exist",
    "permission denied",
    "no password supplied",
    "no such table",
)


def cause_of(err: BaseException) -> BaseException:
    """The database's own error behind Optuna's StorageInternalError."""
    while isinstance(err, optuna.exceptions.StorageInternalError) and err.__cause__ is not None:
        err = err.__cause__
    return err


def transient(err: BaseException) -> bool:
    """A connection-level failure that a server coming back or a lock released would mend."""
    import sqlalchemy.exc as sa

    cause = cause_of(err)
    if not isinstance(cause, (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError)):
        return False
    text = str(cause).lower()
    return not any(p in text for p in PERMANENT)


def _limit() -> float:
    try:
        return max(0.0, float(os.environ.get("AUTOTUNE_STORAGE_RETRY_S", RETRY_S)))
    except ValueError:
        return RETRY_S


def _call(
    method: Callable[..., object], name: str, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> Any:
    deadline, pause, tried = time.monotonic() + _limit(), 0.5, False
    while True:
        try:
            return method(*args, **kwargs)
        except optuna.exceptions.UpdateFinishedTrialError:
            if tried and name == "set_trial_state_values":
                return True  # the first attempt's commit went through before its connection dropped
            raise
        except Exception as err:
            if not transient(err) or time.monotonic() + pause > deadline:
                raise
            reason = " ".join(str(cause_of(err)).split())[:200]
            left = deadline - time.monotonic()
            print(
                f"storage unreachable ({reason}); retrying for up to {left:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(pause)
            pause, tried = min(pause * 2, 8.0), True


def _retried(name: str) -> Any:
    def method(self: RetryingStorage, *args: object, **kwargs: object) -> Any:
        return _call(getattr(self._inner, name), name, args, kwargs)

    method.__name__ = name
    return method


class RetryingStorage(optuna.storages.BaseStorage):
    """An Optuna storage whose every call waits out a transient outage of the one it wraps."""

    def __init__(self, inner: optuna.storages.BaseStorage) -> None:
        self._inner = inner

    # BaseStorage's abstract methods, named here so that type checkers see a concrete class; the
    # loop below wraps every public method alike
    create_new_study = _retried("create_new_study")
    delete_study = _retried("delete_study")
    set_study_user_attr = _retried("set_study_user_attr")
    set_study_system_attr = _retried("set_study_system_attr")
    get_study_id_from_name = _retried("get_study_id_from_name")
    get_study_name_from_id = _retried("get_study_name_from_id")
    get_study_directions = _retried("get_study_directions")
    get_study_user_attrs = _retried("get_study_user_attrs")
    get_study_system_attrs = _retried("get_study_system_attrs")
    get_all_studies = _retried("get_all_studies")
    create_new_trial = _retried("create_new_trial")
    set_trial_param = _retried("set_trial_param")
    set_trial_state_values = _retried("set_trial_state_values")
    set_trial_intermediate_value = _retried("set_trial_intermediate_value")
    set_trial_user_attr = _retried("set_trial_user_attr")
    set_trial_system_attr = _retried("set_trial_system_attr")
    get_trial = _retried("get_trial")
    get_all_trials = _retried("get_all_trials")

    # what BaseStorage does not declare (the RDB engine, ...)
    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


for _name in [n for n in dir(optuna.storages.BaseStorage) if not n.startswith("_")]:
    if callable(getattr(optuna.storages.BaseStorage, _name)):
        setattr(RetryingStorage, _name, _retried(_name))
RetryingStorage.__abstractmethods__ = frozenset()

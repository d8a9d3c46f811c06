"""One command over a lane's envs: step, reset or a rare call, and the outcome published.

``EnvRunner`` knows nothing of processes or sockets beyond its process's control connection: the
worker loop (:mod:`vecshm.worker.main`) wakes it with a command, and it steps its slice of envs, writes
observations, rewards, flags and infos into the shared buffers, and wakes the parent's doorbell.
Like the worker, it knows nothing of SB3 or Gymnasium conventions: it stores raw results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

import gymnasium as gym
import numpy as np

from vecshm.shared.buffers import FINAL_IN_ROWS, INFO_EMPTY, INFO_PIPED, NO_ENV, REWARD_TYPES, Buffers, reward_codes
from vecshm.shared.env_util import call_answers
from vecshm.shared.errors import RemoteError
from vecshm.shared.info_columns import ColumnWriter
from vecshm.shared.layout import flatten, one_array, write_leaf
from vecshm.shared.pickling import dumps
from vecshm.shared.protocol import Arena, AutoReset, Command, Phase, Rebuilt, RebuiltReset, Status
from vecshm.shared.step_times import StepTimes
from vecshm.shared.sync import wake_sleepers
from vecshm.shared.units import CLAIM
from vecshm.worker.actions import action_reader
from vecshm.worker.checks import ObservationError, unwritable_scalars
from vecshm.worker.lane import Lane

__all__ = ["EnvRunner"]

UNCHANGED = object()  # in a command's observations: nothing to write for this env
ONLY_OWNER = (0,)  # the parent, the one owner of the doorbell a lane wakes when it is done


class _EnvFailure(Exception):
    """Carries the records of the envs' exceptions out of the per-env loop."""

    def __init__(self, records: list[RemoteError]) -> None:
        self.records = records


class EnvRunner:
    """Runs one command over the lane's envs and publishes the outcome."""

    def __init__(self, lane: Lane, envs: list[gym.Env], buffers: Buffers) -> None:
        self.lane = lane
        self.envs = envs
        self.buffers = buffers
        self.start = lane.env_start
        self.conn = lane.conn
        self.parent_bell = ((lane.done_bell,), (0,), buffers.parent_asleep)  # (its bell, word, words)
        self.obs_space = envs[0].observation_space
        self.action_space = envs[0].action_space
        layout = buffers.spec
        self.obs_leaves = layout.obs_leaves
        self.obs_fixed = layout.obs_fixed
        self.obs_dynamic = layout.obs_dynamic
        self.action_dynamic = layout.action_dynamic
        # the rows a step writes (rewards, flags, info lengths), as views made once: 0.2 us less a write
        mine, b = slice(self.start, self.start + len(envs)), buffers
        self.step_rows = tuple(a[mine] for a in (b.rewards, b.terminated, b.truncated, b.info_len, b.final_info_len))
        # (shape, dtype) of an observation that is one array, and of a final one its row holds
        self.one_row = (self.obs_leaves[0].shape, self.obs_leaves[0].dtype) if one_array(self.obs_leaves) else None
        self.final_row_of = self.one_row if buffers.final_rows else None
        # each slot's rows of these envs and the ring's rows, as views made once (an observation that
        # is one array; ``[i, ...]``: a 0-d row is a view too): 1 us less a command than indexing
        rows = [s[0] for s in buffers.obs_slots] if self.one_row else []
        self.slot_rows = [[a[i, ...] for i in range(self.start, self.start + len(envs))] for a in rows]
        self.ring_rows = [buffers.ring[0][r, ...] for r in range(len(buffers.ring[0]))] if rows and buffers.ring else []
        self.action_reader = action_reader(buffers, self.start, len(envs), self.action_space)
        self.needs_reset = [False] * len(envs)
        self.last_obs: list[Any] = [None] * len(envs)  # each env's latest observation, for partial resets
        # NEXT_STEP_AHEAD is NEXT_STEP with an ended episode's reset done once the step is published,
        # while the caller computes its actions, and kept until the next step hands it on.
        self.reset_ahead = lane.autoreset is AutoReset.NEXT_STEP_AHEAD
        self.autoreset = AutoReset.NEXT_STEP if self.reset_ahead else lane.autoreset
        self.ahead: dict[int, Any] = {}  # env offset -> (obs, info) of its reset done ahead, or what it raised
        self.piped: dict[tuple[str, int], bytes] = {}
        self.info_columns = ColumnWriter()
        self.reward_codes = lane.reward_codes
        self.reward_types: list[type] | None = None  # the types of the rewards whose codes were written last
        self.step_times = StepTimes(len(envs)) if lane.timed else None  # (vecshm.shared.step_times)

    # -- dispatch ---------------------------------------------------------------------------------

    def run(self, command: Command, seq: int) -> None:
        if command is Command.CALL:  # the answers (or errors) follow on the socket, as piped values do
            self.piped, failures = call_answers(self.conn.recv(), self.envs, self.start)
            self._publish(seq, failures, None)
            return
        self.piped = {}
        during = Phase.STEP if command is Command.STEP else Phase.RESET
        errors: list[RemoteError] = []
        try:
            if command is Command.STEP:
                dynamic = self.conn.recv() if self.action_dynamic else {}
                observations = self._step_all(self.action_reader(dynamic))
            else:
                observations = self._reset_all(self.conn.recv())
            unit = self._write_observations(observations, int(self.buffers.obs_slot[self.lane.number]), during)
        except _EnvFailure as failure:
            errors, unit = failure.records, None
        self._publish(seq, errors, unit)

    def _publish(self, seq: int, errors: list[RemoteError], unit: int | None) -> None:
        """Status, then the ring unit written (the parent takes a batch once its units are named),
        then the command's sequence number, then the bell."""
        me = self.lane.number
        if errors:
            status = Status.ERROR  # the records follow on the socket
        elif self.piped:
            status = Status.OK_PIPED  # values too large for their arena follow on the socket
        else:
            status = Status.OK
        self.buffers.status[me] = status
        if unit is not None:
            self.buffers.unit_lane[unit] = me
        self.buffers.progress[me] = NO_ENV  # between commands no env runs: a death now names none
        if self.step_times is not None:  # (for the barrier's cost in vecshm.stats)
            self.buffers.done_at[me] = perf_counter()
        self.buffers.done_seq[me] = seq
        wake_sleepers(ONLY_OWNER, *self.parent_bell)
        # Anything large goes after the bell, so the parent is already reading when we send.
        if errors:
            self.conn.send(errors)
        elif self.piped:
            self.conn.send(self.piped)

    # -- step and reset ---------------------------------------------------------------------------

    def _step_all(self, action_of: Callable[[int], Any]) -> Sequence[Any]:
        """Step every env; its observations, to write once every env has stepped. Scalars are
        gathered and written once per command. An env that raises does not stop the others (each
        would run in its own process under AsyncVectorEnv or SubprocVecEnv): every failure is
        reported, in env order."""
        start = self.start
        rewards_row, terminated_row, truncated_row, info_lengths, final_info_lengths = self.step_rows
        observations: list[Any] = []  # each env's, in env order
        rewards: list[Any] = []
        terminated: list[Any] = []
        truncated: list[Any] = []
        failures: list[RemoteError] = []
        info_lengths.fill(INFO_EMPTY)  # (an env that returns an info writes its own)
        final_info_lengths.fill(INFO_EMPTY)
        # (looked up once; the loop is written out: a call per env costs more than a cheap env's step)
        progress, me, needs_reset, last_obs = self.buffers.progress, self.lane.number, self.needs_reset, self.last_obs
        # one command in four is timed, env by env (vecshm.shared.step_times): a clock read per env
        step_times = self.step_times
        clock_readings = step_times.readings_for_command() if step_times is not None else None
        if clock_readings is not None:
            clock_readings.append(perf_counter())
        for offset, env in enumerate(self.envs):
            index = start + offset
            progress[me] = index
            try:
                if needs_reset[offset]:
                    obs, info = self._reset_ended(offset, env)
                    needs_reset[offset] = False
                    reward, term, trunc = 0.0, False, False
                else:
                    obs, reward, term, trunc, info = env.step(action_of(index))
                    if term or trunc:
                        obs, info = self._episode_ended(offset, index, obs, info)
                last_obs[offset] = obs
                if info:  # (the others' lengths were cleared for the whole command)
                    self._write_info(Arena.INFO, index, info)
            except Exception as exc:
                failures.append(RemoteError(exc, index, Phase.STEP))
                obs, reward, term, trunc = UNCHANGED, 0.0, False, False
            observations.append(obs)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
            if clock_readings is not None:
                clock_readings.append(perf_counter())
        try:
            rewards_row[...] = rewards
            terminated_row[...] = terminated
            truncated_row[...] = truncated
        except Exception:  # a reward or flag that is not a number: find whose
            failures += unwritable_scalars(self.buffers, self.start, rewards, terminated, truncated)
        if failures:
            raise _EnvFailure(failures)
        if self.reward_codes:
            types = [*map(type, rewards)]
            if types != self.reward_types:  # an env keeps its reward type: most steps write no codes
                self._write_reward_codes(rewards, types)
        return observations

    def publish_step_times(self) -> None:
        """Copy the envs' step-time histograms into their rows of the segment (for vecshm.stats)."""
        if self.step_times is not None:
            self.step_times.publish(self.buffers.env_stats[self.start : self.start + len(self.envs)])

    def _write_reward_codes(self, rewards: Sequence[Any], types: list[type]) -> None:
        """The dtype of each reward (see ``REWARD_DTYPES``), written when the rewards' types change."""
        self.buffers.reward_code[self.start : self.start + len(rewards)] = reward_codes(rewards)
        # an array's dtype may change from one step to the next: such rewards are looked at every step
        self.reward_types = types if REWARD_TYPES.issuperset(types) else None

    def _episode_ended(self, offset: int, index: int, obs: Any, info: dict) -> tuple[Any, dict]:
        """An episode's last step: under SAME_STEP, its final observation and info written and the
        env reset (the reset's observation and info returned); under NEXT_STEP, its reset marked
        for the env's next step; under DISABLED, nothing."""
        if self.autoreset is AutoReset.SAME_STEP:
            self._write_final_obs(index, obs)
            self._write_info(Arena.FINAL_INFO, index, info)
            return self.envs[offset].reset()
        if self.autoreset is AutoReset.NEXT_STEP:
            self.needs_reset[offset] = True
        return obs, info

    def _write_final_obs(self, index: int, obs: Any) -> None:
        """The final observation as the env returned it: in the env's final row where that holds it
        exactly (one C-ordered array of the leaf's shape and dtype), else pickled, as the peers'
        pipes hand it on. Frames of episodes that end together stay off the socket."""
        b, row = self.buffers, self.final_row_of
        if row is not None and type(obs) is np.ndarray and (obs.shape, obs.dtype) == row and obs.flags.c_contiguous:
            b.final_rows[0][index], b.final_obs_blob_len[index] = obs, FINAL_IN_ROWS
        else:
            self._write_blob(Arena.FINAL_OBS, index, obs)

    def reset_ended_ahead(self) -> None:
        """Under NEXT_STEP_AHEAD, reset the envs whose episodes the last step ended, before their
        next command comes (its results wait in ``ahead``; an exception waits too, and is raised
        by the next step). The worker process calls it once its other lanes' commands are run."""
        if not self.reset_ahead:
            return
        for offset, env in enumerate(self.envs):
            if self.needs_reset[offset] and offset not in self.ahead:
                self.buffers.progress[self.lane.number] = self.start + offset  # named if it hangs or dies
                try:
                    self.ahead[offset] = env.reset()
                except Exception as exc:
                    self.ahead[offset] = exc
                self.buffers.progress[self.lane.number] = NO_ENV

    def _reset_ended(self, offset: int, env: gym.Env) -> tuple[Any, dict[str, Any]]:
        """NEXT_STEP's reset of an ended episode: the one done ahead, else now."""
        done = self.ahead.pop(offset, None)
        if done is None:
            return env.reset()
        if isinstance(done, Exception):
            raise done
        return done

    def _write_observations(self, observations: Sequence[Any], slot: int, during: Phase) -> int | None:
        """Write the command's observations: into ``slot`` at the envs' rows, or, for an async
        batch (``CLAIM``), into the next free unit of the ring, claimed now that every env has
        stepped (see :mod:`vecshm.parent.handback.ring`); that unit, if any."""
        b, start = self.buffers, self.start
        if slot == CLAIM:
            unit = self.lane.claims.claim() if self.lane.claims is not None else None
            if unit is None:
                bug = RuntimeError("no free unit in the async ring: this is a vecshm bug, please report it")
                raise _EnvFailure([RemoteError(bug, start, during)])
            arrays, first = b.ring, unit * b.spec.unit_rows
        else:
            arrays, first, unit = b.obs_slots[slot], start, None
        failures = []
        if one := self.one_row:  # (shape, dtype) of an observation that is one array
            shape, dtype = one
            rows = self.slot_rows[slot] if unit is None else self.ring_rows[first : first + len(observations)]
        for offset, obs in enumerate(observations):
            if one and type(obs) is np.ndarray and obs.shape == shape and obs.dtype == dtype:
                rows[offset][...] = obs  # the common case: one memcpy, nothing to check
                continue
            if obs is UNCHANGED:
                continue
            try:
                self._write_obs(arrays, first + offset, start + offset, obs)
            except ObservationError as exc:
                failures.append(RemoteError(exc, start + offset, during))
        if failures:
            raise _EnvFailure(failures)
        return unit

    def _write_obs(self, arrays: list[np.ndarray], row: int, index: int, obs: Any) -> None:
        """Write env ``index``'s observation: fixed leaves at ``row`` of ``arrays``, dynamic ones
        pickled into its arena row. (A single leaf of the right shape and dtype is written by the caller.)"""
        try:
            values = [obs] if self.one_row else flatten(self.obs_space, obs)
            if self.obs_dynamic:
                dynamic = [v for leaf, v in zip(self.obs_leaves, values) if leaf.dynamic]
                values = [v for leaf, v in zip(self.obs_leaves, values) if not leaf.dynamic]
            for leaf, array, value in zip(self.obs_fixed, arrays, values):
                write_leaf(leaf, array, row, value)
        except ValueError as exc:
            raise ObservationError(
                f"the observation does not fit the declared observation space {self.obs_space}: {exc}"
            ) from None
        if self.obs_dynamic:
            self._write_blob(Arena.OBS, index, dynamic)

    def _reset_all(self, requests: list[dict[str, Any] | None]) -> list[Any]:
        """Reset the requested envs; their observations, and for the others (a partial reset) their
        latest one. As for steps, one env's failure does not stop the others."""
        b = self.buffers
        failures: list[RemoteError] = []
        observations: list[Any] = []
        self.reward_types = None  # a reset writes its envs' reward codes: the next step writes them again
        for offset, (env, request) in enumerate(zip(self.envs, requests)):
            index = self.start + offset
            if request is None:  # not part of a partial reset: its latest observation stays
                latest = self.last_obs[offset]
                observations.append(UNCHANGED if latest is None else latest)
                if latest is None and self.obs_dynamic:
                    # Never reset: it has no observation yet. Its fixed leaves read as the slot's
                    # zeros (AsyncVectorEnv's shared memory), its pickled leaves as None (the None
                    # its worker sends without shared memory).
                    nones = [None] * sum(leaf.dynamic for leaf in self.obs_leaves)
                    self._write_blob(Arena.OBS, index, nones)
                continue
            observations.append(UNCHANGED)
            self.ahead.pop(offset, None)  # a reset done ahead is superseded by this one
            try:
                b.progress[self.lane.number] = index
                if type(request) is Rebuilt:
                    obs, info = self._rebuilt(offset, env, request)
                elif type(request) is RebuiltReset:
                    obs, info = env.reset(**request.kwargs)
                    info = {**info, "worker_restarted": True}
                    self.needs_reset[offset] = False
                else:
                    obs, info = env.reset(**request)  # the keywords the facade chose, as its peer passes them
                    self.needs_reset[offset] = False
                self.last_obs[offset] = observations[-1] = obs
                b.rewards[index] = 0.0
                b.reward_code[index] = 0  # a reset's reward reads as a Python float's 0.0
                b.terminated[index] = False
                b.truncated[index] = type(request) is Rebuilt
                b.final_info_len[index] = INFO_EMPTY
                self._write_info(Arena.INFO, index, info)
            except Exception as exc:
                failures.append(RemoteError(exc, index, Phase.RESET))
        if failures:
            raise _EnvFailure(failures)
        return observations

    def _rebuilt(self, offset: int, env: gym.Env, request: Rebuilt) -> tuple[Any, dict[str, Any]]:
        """Reset a rebuilt env (no seed: its predecessor's generator is lost) whose episode the
        restart cut short; what this command returns for it: the lost episode's last observation,
        no info (the parent flags the restart). Under NEXT_STEP its next step hands on the reset,
        as after any truncation; under DISABLED the caller resets it by mask."""
        reset = env.reset()
        if request.hold_reset:
            self.ahead[offset] = reset
        self.needs_reset[offset] = request.hold_reset
        return request.last_obs, {}

    def _write_info(self, kind: Arena, index: int, info: dict) -> None:
        """An info as typed columns when it is a flat dict of numbers, else pickled (see vecshm.shared.info_columns)."""
        lengths, arena = self.buffers.arenas[kind]
        if not info:
            lengths[index] = INFO_EMPTY
            return
        length = self.info_columns.write(info, arena, index)
        if length is None:
            self._write_blob(kind, index, info)
        else:
            lengths[index] = length

    def _write_blob(self, kind: Arena, index: int, value: Any) -> None:
        """Pickle ``value`` into env ``index``'s arena row, or onto the socket when it does not fit."""
        lengths, arena = self.buffers.arenas[kind]
        blob = dumps(value)
        if len(blob) <= arena.shape[1]:
            arena[index, : len(blob)] = np.frombuffer(blob, dtype=np.uint8)
            lengths[index] = len(blob)
        else:
            lengths[index] = INFO_PIPED
            self.piped[(kind, index)] = blob

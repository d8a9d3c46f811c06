"""SB3's ``VecEnv`` contract, without importing Stable-Baselines3 (and so without torch).

Behaviour follows ``stable_baselines3.common.vec_env.base_vec_env`` (MIT) method for method, so
code written against SB3's classes works unchanged; when SB3 is imported, these classes are
registered as virtual subclasses of SB3's (see :mod:`vecshm.sb3`).
"""

from __future__ import annotations

import inspect
import numbers
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from copy import deepcopy
from typing import Any, Union, cast

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecshm.sb3 import sb3_counterpart, stands_for

__all__ = [
    "VecEnv",
    "VecEnvWrapper",
    "VecEnvIndices",
    "VecEnvObs",
    "VecEnvStepReturn",
    "CloudpickleWrapper",
    "tile_images",
    "stack_dynamic",
]

VecEnvIndices = Union[None, int, Iterable[int]]  # noqa: UP007
VecEnvObs = Union[np.ndarray, dict[str, np.ndarray], tuple[np.ndarray, ...]]  # noqa: UP007
VecEnvStepReturn = tuple[VecEnvObs, np.ndarray, np.ndarray, list[dict]]


def stack_dynamic(space: spaces.Space, values: list[Any]) -> np.ndarray:
    """A batch of values of a space without a fixed size (Text, Sequence, ...), as SubprocVecEnv builds
    it with ``np.stack``; an object array (one value per env) where ``np.stack`` fails (ragged values)."""
    try:
        return np.stack(values)
    except (ValueError, TypeError):
        batch = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):
            batch[i] = value
        return batch


def tile_images(images_nhwc: Sequence[np.ndarray]) -> np.ndarray:
    """Tile N images into one grid image, as close to square as possible (SB3's layout)."""
    img_nhwc = np.asarray(images_nhwc)
    n_images, height, width, n_channels = img_nhwc.shape
    new_height = int(np.ceil(np.sqrt(n_images)))
    new_width = int(np.ceil(float(n_images) / new_height))
    padding = np.zeros((new_height * new_width - n_images, height, width, n_channels), dtype=img_nhwc.dtype)
    img_nhwc = np.concatenate([img_nhwc, padding]) if len(padding) else img_nhwc
    out = img_nhwc.reshape((new_height, new_width, height, width, n_channels)).transpose(0, 2, 1, 3, 4)
    return out.reshape((new_height * height, new_width * width, n_channels))


@stands_for("VecEnv")
class VecEnv(ABC):
    """A batch of ``num_envs`` envs stepped together, with SB3's semantics (auto-reset, info lists)."""

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        """SB3's own class counts as its vecshm copy (``isinstance(sb3_wrapper, vecshm.Wrapper)``), so
        ``is_vecenv_wrapped`` with vecshm's class finds the wrapper an SB3 algorithm added. Checks the
        MRO, not ``issubclass``: vecshm's classes are registered under SB3's, which would recurse."""
        counterpart = sb3_counterpart(cls)
        if counterpart is not None and counterpart in getattr(subclass, "__mro__", ()):
            return True
        return NotImplemented

    def __init__(self, num_envs: int, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._seeds: list[int | None] = [None for _ in range(num_envs)]
        self._options: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        try:
            render_modes = self.get_attr("render_mode")
        except AttributeError:
            warnings.warn(
                "The `render_mode` attribute is not defined in your environment. It will be set to None.", stacklevel=2
            )
            render_modes = [None for _ in range(num_envs)]
        assert all(mode == render_modes[0] for mode in render_modes), (
            "render_mode mode should be the same for all environments"
        )
        self.render_mode = render_modes[0]
        modes: list[str] = []
        if self.render_mode is not None:
            modes = ["human", "rgb_array"] if self.render_mode == "rgb_array" else [self.render_mode]
        self.metadata = {"render_modes": modes}

    def _reset_seeds(self) -> None:
        self._seeds = [None for _ in range(self.num_envs)]

    def _reset_options(self) -> None:
        self._options = [{} for _ in range(self.num_envs)]

    @abstractmethod
    def reset(self) -> VecEnvObs:
        """Reset all envs (with the seeds/options set since the last reset) and return observations."""

    @abstractmethod
    def step_async(self, actions: np.ndarray) -> None:
        """Start stepping every env with its row of ``actions``."""

    @abstractmethod
    def step_wait(self) -> VecEnvStepReturn:
        """Wait for the step started by ``step_async``: ``(obs, rewards, dones, infos)``."""

    @abstractmethod
    def close(self) -> None:
        """Release the envs and every resource behind them."""

    def has_attr(self, attr_name: str) -> bool:
        try:
            self.get_attr(attr_name)
            return True
        except AttributeError:
            return False

    @abstractmethod
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute ``attr_name`` of each env in ``indices``."""

    @abstractmethod
    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set attribute ``attr_name`` on each env in ``indices``."""

    @abstractmethod
    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call ``method_name`` on each env in ``indices`` and return the results."""

    @abstractmethod
    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each env in ``indices`` is wrapped with ``wrapper_class``."""

    def step(self, actions: np.ndarray) -> VecEnvStepReturn:
        self.step_async(actions)
        return self.step_wait()

    def get_images(self) -> Sequence[np.ndarray | None]:
        raise NotImplementedError

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """Tiled ``rgb_array`` image of all envs (or an OpenCV window for ``"human"``), as SB3 does."""
        if mode == "human" and self.render_mode != mode:
            if self.render_mode != "rgb_array":
                warnings.warn(
                    f"You tried to render a VecEnv with mode='{mode}' but the render mode defined when "
                    f"initializing the environment must be 'human' or 'rgb_array', not '{self.render_mode}'.",
                    stacklevel=2,
                )
                return None
        elif mode and self.render_mode != mode:
            warnings.warn(
                f"Render modes are set when the envs are created; the mode ({mode}) has to be the same as "
                f"the environment render mode ({self.render_mode}), which is not the case.",
                stacklevel=2,
            )
            return None
        mode = mode or self.render_mode
        if mode is None:
            warnings.warn(
                "You tried to call render() but no `render_mode` was passed to the env constructor.", stacklevel=2
            )
            return None
        if self.render_mode == "human":
            self.env_method("render")
            return None
        if mode in ("rgb_array", "human"):
            big_image = tile_images(self.get_images())  # type: ignore[arg-type]
            if mode == "rgb_array":
                return big_image
            try:
                import cv2
            except ImportError as exc:
                raise ImportError(
                    "render(mode='human') shows frames with OpenCV: pip install 'vecshm[render]'"
                ) from exc
            cv2.imshow("vecenv", big_image[:, :, ::-1])
            cv2.waitKey(1)
            return None
        self.env_method("render")
        return None

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed env ``i`` with ``seed + i`` at the next reset (a random base seed when None)."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + idx for idx in range(self.num_envs)]
        return self._seeds

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Options passed to each env at the next reset only (one dict for all, or one per env)."""
        if options is None:
            options = {}
        if isinstance(options, dict):
            self._options = deepcopy([options] * self.num_envs)
        else:
            self._options = deepcopy(options)

    @property
    def unwrapped(self) -> VecEnv:
        if isinstance(self, VecEnvWrapper):
            return self.venv.unwrapped
        return self

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        """Name of the class whose attribute ``name`` would be hidden by a wrapper, if any."""
        if hasattr(self, name) and already_found:
            return f"{type(self).__module__}.{type(self).__name__}"
        return None

    def _get_indices(self, indices: VecEnvIndices) -> Iterable[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, numbers.Integral):
            return [int(indices)]
        return cast(Iterable[int], indices)

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@stands_for("VecEnvWrapper")
class VecEnvWrapper(VecEnv):
    """Base of vec env wrappers: forwards everything it does not override to ``venv``."""

    def __init__(
        self,
        venv: VecEnv,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
    ) -> None:
        self.venv = venv
        super().__init__(
            num_envs=venv.num_envs,
            observation_space=observation_space or venv.observation_space,
            action_space=action_space or venv.action_space,
        )
        self.class_attributes = dict(inspect.getmembers(self.__class__))

    def step_async(self, actions: np.ndarray) -> None:
        self.venv.step_async(actions)

    @abstractmethod
    def reset(self) -> VecEnvObs:
        pass

    @abstractmethod
    def step_wait(self) -> VecEnvStepReturn:
        pass

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        return self.venv.seed(seed)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        return self.venv.set_options(options)

    def close(self) -> None:
        return self.venv.close()

    def render(self, mode: str | None = None) -> np.ndarray | None:
        return self.venv.render(mode=mode)

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self.venv.get_images()

    def has_attr(self, attr_name: str) -> bool:
        return self.venv.has_attr(attr_name)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self.venv.get_attr(attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        return self.venv.set_attr(attr_name, value, indices)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self.venv.env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self.venv.env_is_wrapped(wrapper_class, indices=indices)

    def __getattr__(self, name: str) -> Any:
        """Find ``name`` on the wrapped vec envs, refusing lookups a nearer wrapper would shadow."""
        if name.startswith("__") or name in ("venv", "class_attributes"):
            raise AttributeError(name)
        blocked_class = self.getattr_depth_check(name, already_found=False)
        if blocked_class is not None:
            own_class = f"{type(self).__module__}.{type(self).__name__}"
            raise AttributeError(
                f"Error: Recursive attribute lookup for {name} from {own_class} is "
                f"ambiguous and hides attribute from {blocked_class}"
            )
        return self.getattr_recursive(name)

    def _get_all_attributes(self) -> dict[str, Any]:
        all_attributes = self.__dict__.copy()
        all_attributes.update(self.class_attributes)
        return all_attributes

    def getattr_recursive(self, name: str) -> Any:
        all_attributes = self._get_all_attributes()
        if name in all_attributes:
            return getattr(self, name)
        if hasattr(self.venv, "getattr_recursive"):
            return self.venv.getattr_recursive(name)
        return getattr(self.venv, name)

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        all_attributes = self._get_all_attributes()
        if name in all_attributes and already_found:
            return f"{type(self).__module__}.{type(self).__name__}"
        if name in all_attributes and not already_found:
            return self.venv.getattr_depth_check(name, True)
        return self.venv.getattr_depth_check(name, already_found)


class CloudpickleWrapper:
    """Pickles its content with cloudpickle (lambdas and closures included)."""

    def __init__(self, var: Any) -> None:
        self.var = var

    def __getstate__(self) -> Any:
        return cloudpickle.dumps(self.var)

    def __setstate__(self, var: Any) -> None:
        self.var = cloudpickle.loads(var)

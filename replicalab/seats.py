"""The one vocabulary of roles, seats and scripted Scientists, used by the game, every config and command.

A *role* is a side of the negotiation: ``scientist`` or ``lab_manager`` (type ``AgentRole``, defined with the
contracts in ``replicalab/models.py``; ``ROLES`` lists them).  A *seat spec* says who plays a role, spelled the
same in configs, on the command line and in workers:

- ``policy`` -- the weights being trained (training only);
- ``scripted`` -- the role's default scripted agent (Scientist: ``scripted:naive``; Lab Manager:
  ``scripted:thrifty``);
- ``scripted:NAME`` -- a named scripted agent.  Scientists: ``naive``, the skill combinations
  (``reader``, ``defender``, ``asker`` and their ``+`` joins such as ``reader+defender+asker``), ``oracle``,
  ``random``.  Lab Managers: ``cooperative``, ``thrifty``;
- ``model:DIR`` -- a checkpoint directory or a Hugging Face id; ``model:default`` is the embedded default.

``parse_seat`` is the only parser of these strings; it raises ``ValueError`` naming the valid values.
"""

from __future__ import annotations

from typing import Callable, Literal, NamedTuple, get_args

from replicalab.agents import SCIENTIST_FACTORIES
from replicalab.lab import DEFAULT_LAB_POLICY, LAB_POLICIES
from replicalab.models import AgentRole, ScientistAction, ScientistObservation

#: The two roles, Scientist first (the order turns are taken in); ``AgentRole`` is their type.
ROLES: tuple[AgentRole, ...] = get_args(AgentRole)


def other_role(role: str) -> AgentRole:
    """The role across the table from ``role``."""
    return ROLES[1] if role == ROLES[0] else ROLES[0]
SeatKind = Literal["policy", "scripted", "model"]
POLICY = "policy"
SCRIPTED = "scripted"
MODEL = "model"
MODEL_PREFIX = MODEL + ":"
SCRIPTED_PREFIX = SCRIPTED + ":"
#: ``model:default`` names the embedded default model (built on first use).
DEFAULT_MODEL = "default"
#: The name of every scripted Scientist (the keys of ``replicalab.agents.SCIENTIST_FACTORIES``).
SCRIPTED_SCIENTISTS: tuple[str, ...] = tuple(SCIENTIST_FACTORIES)
#: The Scientist that plain ``scripted`` means.
DEFAULT_SCRIPTED_SCIENTIST = "naive"
#: The name of every scripted Lab Manager (``replicalab.lab.LAB_POLICIES``).
SCRIPTED_LAB_MANAGERS: tuple[str, ...] = LAB_POLICIES
#: The scripted agent names of each role, and the one plain ``scripted`` means.
SCRIPTED_NAMES: dict[str, tuple[str, ...]] = {"scientist": SCRIPTED_SCIENTISTS, "lab_manager": SCRIPTED_LAB_MANAGERS}
DEFAULT_SCRIPTED: dict[str, str] = {"scientist": DEFAULT_SCRIPTED_SCIENTIST, "lab_manager": DEFAULT_LAB_POLICY}
#: Scripted Scientists that read the hidden reference: baselines only, never a training seat.
PRIVILEGED_SCIENTISTS: tuple[str, ...] = ("oracle",)


class Seat(NamedTuple):
    """A parsed seat spec: ``kind`` and its argument (the scripted agent's name, ``""`` for ``policy``, the
    model directory or id for ``model``)."""

    kind: SeatKind
    arg: str = ""

    @property
    def spec(self) -> str:
        """The canonical spelling of this seat."""
        if self.kind == POLICY:
            return self.kind
        return f"{self.kind}:{self.arg}"


def seat_choices(role: str, *, training: bool = False) -> list[str]:
    """The valid seat specs of ``role`` (``model:DIR`` standing for any model); ``training`` adds
    ``policy`` and drops the privileged Scientists."""
    names = [n for n in SCRIPTED_NAMES[role] if not (training and n in PRIVILEGED_SCIENTISTS)]
    scripted = [SCRIPTED] + [SCRIPTED_PREFIX + n for n in names]
    return ([POLICY] if training else []) + scripted + [MODEL_PREFIX + "DIR", MODEL_PREFIX + DEFAULT_MODEL]


def parse_seat(role: str, spec: str, *, training: bool = False) -> Seat:
    """Parse ``spec`` for ``role``'s seat.  ``training=True`` is a training run's seat: ``policy`` is
    allowed and the privileged Scientists are not.  Raises ValueError with the valid values."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; valid roles: {', '.join(ROLES)}")
    spec = spec.strip() if isinstance(spec, str) else spec
    valid = f"valid {role} seats: " + ", ".join(seat_choices(role, training=training))
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"empty {role} seat; {valid}")
    if spec == POLICY and training:
        return Seat(POLICY)
    if spec == SCRIPTED:
        return Seat(SCRIPTED, DEFAULT_SCRIPTED[role])
    if spec.startswith(SCRIPTED_PREFIX):
        name = spec[len(SCRIPTED_PREFIX):]
        if name in SCRIPTED_NAMES[role] and not (training and name in PRIVILEGED_SCIENTISTS):
            return Seat(SCRIPTED, name)
        raise ValueError(f"{role} seat {spec!r} is not a scripted agent here; {valid}")
    if spec.startswith(MODEL_PREFIX) and spec[len(MODEL_PREFIX):].strip():
        return Seat(MODEL, spec[len(MODEL_PREFIX):].strip())
    hint = ""
    if spec in SCRIPTED_NAMES[role]:
        hint = f" (did you mean {SCRIPTED_PREFIX}{spec}?)"
    elif "/" in spec or spec.startswith("."):
        hint = f" (a model is written {MODEL_PREFIX}{spec})"
    raise ValueError(f"{role} seat {spec!r} is not a seat{hint}; {valid}")


def scripted_scientist(name: str, seed: int, template: str,
                       difficulty: str) -> Callable[[ScientistObservation], ScientistAction]:
    """A fresh scripted Scientist ``name`` for one episode (the oracle reads that episode's scenario)."""
    return SCIENTIST_FACTORIES[name](seed, template, difficulty)


def scripted_agent(role: str, name: str, seed: int, template: str, difficulty: str):
    """What a ``scripted:NAME`` seat of ``role`` plays in one episode: a fresh scripted Scientist, or the Lab
    Manager's policy name (``episode_loop`` builds that one for the episode's scenario)."""
    return scripted_scientist(name, seed, template, difficulty) if role == "scientist" else name

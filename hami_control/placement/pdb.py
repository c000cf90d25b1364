"""PodDisruptionBudgets as preemption counts them: which victims of a set would violate a budget.

kube-scheduler's DefaultPreemption counts a victim as a violation when a budget of its
namespace selects it, the pod is not already in the budget's `status.disruptedPods`, and the
budget's `status.disruptionsAllowed` is used up by the victims counted before it. A budget with
an empty selector selects nothing there (policy/v1 says "all pods"; the scheduler skips it),
and neither does any budget select a pod without labels. Preemption may still violate budgets: it prefers sets that
violate fewer, and says how many (`NumPDBViolations`).
"""
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence


@dataclass(frozen=True)
class PdbSpec:
    """What preemption reads of one PodDisruptionBudget."""

    namespace: str
    name: str
    match_labels: Mapping = field(default_factory=dict)
    expressions: tuple = ()           # ((key, operator, frozenset(values)), ...)
    allowed: int = 0                  # status.disruptionsAllowed
    disrupted: frozenset = frozenset()    # status.disruptedPods (names)

    def selects(self, namespace: str, labels: Mapping) -> bool:
        """Whether the budget covers a pod of that namespace with those labels."""
        if namespace != self.namespace or not labels or \
                (not self.match_labels and not self.expressions):
            return False
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(_expression(labels, key, op, values) for key, op, values in self.expressions)


def _expression(labels: Mapping, key: str, op: str, values: frozenset) -> bool:
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False                     # an operator the API server would have refused


def parse_pdb(obj: Mapping) -> Optional[PdbSpec]:
    """The PdbSpec of a policy/v1 PodDisruptionBudget dict (None without a name)."""
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        return None
    selector = (obj.get("spec") or {}).get("selector") or {}
    status = obj.get("status") or {}
    expressions = tuple((str(e.get("key")), str(e.get("operator")),
                         frozenset(str(v) for v in e.get("values") or ()))
                        for e in selector.get("matchExpressions") or [] if isinstance(e, Mapping))
    try:
        allowed = int(status.get("disruptionsAllowed") or 0)
    except (TypeError, ValueError):
        allowed = 0
    return PdbSpec(str(meta.get("namespace") or "default"), str(meta["name"]),
                   dict(selector.get("matchLabels") or {}), expressions, allowed,
                   frozenset((status.get("disruptedPods") or {}).keys()))


def violations(victims: Sequence, budgets: Iterable[PdbSpec]) -> int:
    """How many of the victims (objects with `key` "ns/name" and `labels`), taken in order,
    would each exceed a budget's allowed disruptions."""
    budgets = list(budgets)
    if not budgets:
        return 0
    left = [b.allowed for b in budgets]
    count = 0
    for victim in victims:
        namespace, _, name = victim.key.partition("/")
        violated = False
        for i, budget in enumerate(budgets):
            if not budget.selects(namespace, victim.labels) or name in budget.disrupted:
                continue
            left[i] -= 1
            if left[i] < 0:
                violated = True
        count += violated
    return count

"""The example pods (`examples/*.yaml`, plain Kubernetes manifests a user could `kubectl
apply`), each with its promise in `demo.hami.io/expect` (hami_sim/demo/expect.py)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hami_sim.demo.expect import (EXPECT_ANNOTATION, SHOWS_ANNOTATION, Expectation,
                                  ExpectationError, parse)

EXAMPLES_ENV = "HAMI_DEMO_EXAMPLES"


class ExampleError(ValueError):
    """An example file the demo cannot use; the message names the file and what to fix."""


def quantities_as_strings(pod: dict) -> dict:
    """Resource quantities written as YAML numbers (`nvidia.com/gpu: 1`) become strings, as
    the API server stores them (the Python client's models accept only strings)."""
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = c.get("resources") or {}
        for kind in ("limits", "requests"):
            values = resources.get(kind) or {}
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    values[name] = str(value)
    return pod


@dataclass(frozen=True)
class Example:
    """One example pod."""

    source: Path
    pod: dict
    expectation: Expectation
    shows: str

    @property
    def name(self) -> str:
        """The pod's name."""
        return self.pod["metadata"]["name"]

    @property
    def namespace(self) -> str:
        """The pod's namespace (default when the manifest names none)."""
        return self.pod["metadata"].get("namespace") or "default"


def default_examples_dir() -> Path:
    """$HAMI_DEMO_EXAMPLES, else the repository's examples/ folder."""
    if os.environ.get(EXAMPLES_ENV):
        return Path(os.environ[EXAMPLES_ENV])
    return Path(__file__).resolve().parents[2] / "examples"


def _example(path: Path, doc) -> Example:
    if not isinstance(doc, dict) or doc.get("kind") != "Pod":
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise ExampleError(f"{path}: only Pods are examples, found {kind!r}")
    meta = doc.get("metadata") or {}
    if not meta.get("name"):
        raise ExampleError(f"{path}: a pod without metadata.name (generateName is not "
                           "supported: the expectations refer to pods by name)")
    annotations = meta.get("annotations") or {}
    if EXPECT_ANNOTATION not in annotations:
        raise ExampleError(f"{path}: pod {meta['name']} has no {EXPECT_ANNOTATION} annotation "
                           "saying what should happen")
    try:
        expectation = parse(str(annotations[EXPECT_ANNOTATION]))
    except ExpectationError as e:
        raise ExampleError(f"{path}: pod {meta['name']}: {EXPECT_ANNOTATION}: {e}") from e
    return Example(path, quantities_as_strings(doc), expectation,
                   str(annotations.get(SHOWS_ANNOTATION, "")))


def load_examples(directory=None) -> list:
    """Every pod of every *.yaml / *.yml file of directory, in file then document order."""
    import yaml
    directory = Path(directory or default_examples_dir())
    files = sorted(p for p in directory.glob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    if not files:
        raise ExampleError(f"no example manifests (*.yaml) in {directory}; pass --examples DIR")
    examples, names = [], set()
    for path in files:
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            raise ExampleError(f"{path}: cannot read it: {e}") from e
        for doc in docs:
            example = _example(path, doc)
            if (example.namespace, example.name) in names:
                raise ExampleError(f"{path}: pod {example.name} is defined twice")
            names.add((example.namespace, example.name))
            examples.append(example)
    for example in examples:
        other = example.expectation.same_gpu_as
        if other and (example.namespace, other) not in names:
            raise ExampleError(f"{example.source}: pod {example.name} expects the GPU of "
                               f"{other}, which no example defines")
    return examples

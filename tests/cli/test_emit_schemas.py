"""The documents `mfukit train --emit k8s` writes, validated against the schemas their API servers use.

* the ConfigMap, and the JobSet's Job template as a batch/v1 Job, against the Kubernetes OpenAPI schemas
  that kubernetes-validate ships (offline, strict: an unknown field is an error);
* the JobSet against the ``openAPIV3Schema`` of the JobSet CRD, v0.12.0 (tests/data/k8s, pinned), with
  every object closed to fields its schema does not name (the API server would prune them silently).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "tiny-cpu.toml")
CRD = Path(__file__).parents[1] / "data" / "k8s" / "jobset-v0.12.0" / "jobset.x-k8s.io_jobsets.yaml"
KUBERNETES_VERSION = "1.36"
"""a Kubernetes release JobSet v0.12.0 supports (its go.mod builds on k8s.io/api v0.36)"""


@functools.cache
def jobset_validator() -> jsonschema.protocols.Validator:
    """Built once: checking the 800 kB schema itself is what takes the time."""
    schema = jobset_schema()
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator_class.check_schema(schema)
    return validator_class(schema)


def jobset_schema() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the 800 kB CRD in a second, not ten
    crd = yaml.load(CRD.read_text(encoding="utf-8"), Loader=loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return closed(version["schema"]["openAPIV3Schema"])


def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that lists its properties."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) for key, value in schema.items()}
    preserved = out.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and "additionalProperties" not in out and not preserved:
        out["additionalProperties"] = False
    return out


def emitted(mfukit: Any, out: Path, *extra: str) -> list[dict[str, Any]]:
    run = mfukit(
        "train", EXAMPLE, "--emit", "k8s", "--out", str(out), "--image", "registry.example/mfukit:1",
        "--system", "dgx-h100", "--nproc-per-node", "8", "--global-batch-size", "64", *extra,
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    return list(yaml.safe_load_all((out / "train-jobset.yaml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("nnodes", ["1", "2", "1:2"])
def test_configmap_and_job_template_match_the_kubernetes_schemas(
    mfukit: Any, tmp_path: Path, nnodes: str
) -> None:
    config_map, jobset = emitted(mfukit, tmp_path / "run", "--nnodes", nnodes)
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)
    for replicated in jobset["spec"]["replicatedJobs"]:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{jobset['metadata']['name']}-{replicated['name']}"},
            "spec": replicated["template"]["spec"],
        }
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_jobset_matches_the_jobset_crd(mfukit: Any, tmp_path: Path) -> None:
    _, jobset = emitted(mfukit, tmp_path / "run", "--nnodes", "2")
    jobset_validator().validate(jobset)


def test_the_schemas_catch_what_they_should(mfukit: Any, tmp_path: Path) -> None:
    """The checks above can fail: a misspelt field and a wrong type are errors."""
    config_map, jobset = emitted(mfukit, tmp_path / "run")
    typo = copy.deepcopy(jobset)
    typo["spec"]["network"]["enableDNSHostname"] = typo["spec"]["network"].pop("enableDNSHostnames")
    with pytest.raises(jsonschema.ValidationError):
        jobset_validator().validate(typo)
    wrong = copy.deepcopy(jobset)
    wrong["spec"]["failurePolicy"]["maxRestarts"] = "3"
    with pytest.raises(jsonschema.ValidationError):
        jobset_validator().validate(wrong)
    bad_map = copy.deepcopy(config_map)
    bad_map["data"]["config.json"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad_map, KUBERNETES_VERSION, strict=True)

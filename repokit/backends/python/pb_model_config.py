"""``pb_utils.ModelConfig``: the config a model's ``auto_complete_config`` may extend.

Same rules and messages as Triton's: only max_batch_size, dynamic batching, inputs, outputs and
the transaction policy can be set, and they may not contradict what the config already says.
"""

from __future__ import annotations

import json
from typing import Any


def _listed(names: tuple[str, ...]) -> str:
    """'a', 'b' and 'c' (Triton's wording)."""
    quoted = [f"'{name}'" for name in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else quoted[0]


class ModelConfig:
    """The config handed to ``auto_complete_config``; models may add inputs/outputs etc."""

    def __init__(self, model_config: str) -> None:
        self._config: dict[str, Any] = json.loads(model_config)
        self._config.setdefault("input", [])
        self._config.setdefault("output", [])

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def _name(self) -> str:
        return str(self._config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._config.setdefault("dynamic_batching", {})

    def _add(self, key: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        side = key
        if "name" not in tensor:
            raise ValueError(
                f"{side} in auto-complete-config function for model '{self._name()}' is "
                "missing 'name' property."
            )
        for prop in tensor:
            if prop not in allowed:
                raise ValueError(
                    f"{side} '{tensor['name']}' in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than {_listed(allowed)}."
                )
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(
                    f"{side} '{tensor['name']}' in auto-complete-config function for model "
                    f"'{self._name()}' is missing '{prop}' property."
                )
        for existing in self._config[key]:
            if existing.get("name") != tensor["name"]:
                continue
            declared = existing.get("data_type", "TYPE_INVALID")
            if declared != "TYPE_INVALID" and declared != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name()}', configuration expects datatype "
                    f"{declared} for {side} '{tensor['name']}', model provides "
                    f"{tensor['data_type']}"
                )
            if existing.get("dims") and list(existing["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{self._name()}', tensor '{tensor['name']}': the model expects dims "
                    f"{list(tensor['dims'])} but the model configuration specifies dims "
                    f"{list(existing['dims'])}"
                )
            existing.update(tensor)
            return
        self._config[key].append(dict(tensor))

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than 'decoupled'."
                )
        policy = self._config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name()}', which is already set to '{bool(policy['decoupled'])}'."
                )
            policy["decoupled"] = wanted

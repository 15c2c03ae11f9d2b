"""What a GPU-hour costs, when the admin says so: a YAML of prices per GPU model, spot and on-demand.

    currency: USD
    gpus:
      - model: A100-SXM4-40GB     # matched in the GPU's model name (nvidia-smi `name`, DCGM `modelName`)
        onDemand: 3.67            # per GPU-hour
        spot: 1.10

No price is ever invented: without a file the report counts GPU-hours only, and a GPU whose model no entry
matches has no price (the report says how many such GPU-hours it could not price). `examples/prices.yaml`
holds an example whose values are marked as examples, not quotes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpupack.core import yamldoc
from gpupack.core.validation import DOCUMENT_CONFIG, describe

MAX_PRICES_BYTES = 1024 * 1024

Price = Annotated[float, Field(ge=0, le=10_000)]


class PriceError(ValueError):
    """A prices file that cannot be used; the message names the field."""


class ModelPrice(BaseModel):
    """The price of one GPU model per GPU-hour."""

    model_config = ConfigDict(**DOCUMENT_CONFIG)

    model: str = Field(min_length=1, max_length=200)
    """Matched case-insensitively in the GPU's model name: `A100-SXM4-40GB` matches `NVIDIA A100-SXM4-40GB`."""
    on_demand: Price | None = None
    spot: Price | None = None
    """Defaults to the on-demand price when absent (a spot node priced as on-demand overstates, never hides)."""


class Prices(BaseModel):
    """The whole prices file."""

    model_config = ConfigDict(**DOCUMENT_CONFIG)

    currency: str = Field(default="USD", min_length=1, max_length=10)
    note: str | None = Field(default=None, max_length=200)
    """Said beside the prices wherever the report shows money (`example prices, not quotes`): a reader of a report
    priced with examples must not take its money for a bill."""
    gpus: list[ModelPrice] = Field(min_length=1, max_length=1000)

    def per_gpu_hour(self, model: str | None, spot: bool) -> float | None:
        """The price of one GPU-hour of `model` on a spot or on-demand node; None when no entry matches. The
        longest matching entry wins (`A100-SXM4-80GB` before `A100`)."""
        if not model:
            return None
        text = model.lower()
        matches = sorted((p for p in self.gpus if p.model.lower() in text), key=lambda p: -len(p.model))
        for entry in matches:
            price = entry.spot if spot and entry.spot is not None else entry.on_demand
            if price is not None:
                return price
        return None


def read_prices(path: Path) -> Prices:
    """Read and validate a prices file. Raises PriceError naming the file and field, or OSError."""
    raw = path.read_bytes()
    if len(raw) > MAX_PRICES_BYTES:
        raise PriceError(f"{path}: larger than a prices file ({MAX_PRICES_BYTES} bytes)")
    try:
        data = yamldoc.load(raw)
    except (yaml.YAMLError, RecursionError) as exc:
        raise PriceError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from exc
    try:
        return Prices.model_validate(data)
    except ValidationError as exc:
        raise PriceError(f"{path}: {describe(exc, limit=3)}") from exc

"""``from_pretrained`` of the plugin's models: fairseq's, returning the plugin's hub interface
(``fairseq_san.hub``), fairseq's way for a model to give its own."""

from typing import Any


class HubModel:
    """A model mixin: ``from_pretrained`` as ``fairseq_san.hub_loading.from_pretrained``."""

    @classmethod
    def from_pretrained(
        cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs
    ) -> Any:
        # Imported here: the hub imports the tasks (their checks of generation options), and
        # the models import no task.
        from fairseq_san.hub_loading import from_pretrained

        return from_pretrained(
            cls, model_name_or_path, checkpoint_file, data_name_or_path, **kwargs
        )

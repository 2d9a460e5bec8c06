"""cmixlib: context mixing in Transformer encoders."""
from .models import ModelBundle, ModelLoadError, load_model, random_model, packaged_model_path

__version__ = "0.1.0"

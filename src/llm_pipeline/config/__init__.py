"""One JSON config, validated into typed sections."""

from llm_pipeline.config.cluster import ClusterConfig
from llm_pipeline.config.data import DataConfig
from llm_pipeline.config.deploy import DeployConfig, DeployPolicyConfig
from llm_pipeline.config.errors import ConfigError
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.config.loader import LoadedConfig, load_config, parse_override
from llm_pipeline.config.model import EncoderDecoderSource, ModelConfig
from llm_pipeline.config.pipeline import PipelineConfig
from llm_pipeline.config.train import DpoSettings, LoraSettings, TrainConfig
from llm_pipeline.config.vertex import VertexConfig

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "DataConfig",
    "DeployConfig",
    "DeployPolicyConfig",
    "DpoSettings",
    "EncoderDecoderSource",
    "EvaluateConfig",
    "LoadedConfig",
    "LoraSettings",
    "ModelConfig",
    "PipelineConfig",
    "TrainConfig",
    "VertexConfig",
    "load_config",
    "parse_override",
]

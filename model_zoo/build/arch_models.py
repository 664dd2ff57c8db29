"""The public-architecture set: the classes users actually have (Hugging Face transformers,
torchvision, timm, keras.applications, keras-hub, subclassed Keras models), each built from its
public config or factory at a small size, with seeded weights perturbed so its outputs are of
order 1 (random inits often give ~0 or constant outputs, and parity then proves nothing).
Nothing is downloaded.

``ARCHS`` maps a name to an ``Arch``: its family (a row of the benchmark table), its framework
(``torch`` or ``keras``), ``make()`` returning ``(model, samples)`` (the samples as
``unframe.convert(sample_inputs=...)`` takes them) and the convert options its export needs.
``heavy`` marks the keras.applications siblings whose only difference from a listed one is size
(ConvNeXtXLarge, EfficientNetB7...) and builders that take minutes (FCOS, whose heads are trained):
``bench/architectures.py --heavy`` runs them too.

The manifest's builders are ``arch_models.py:build_<name>``: ``build_<name>(out_dir, opset)`` exports through
unframe (the route under test) and writes ``model.onnx``, ``inputs.npz`` and the framework's own
``outputs.npz``, plus the native file where the framework saves one (``model.keras``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torchvision_shim
from zoo_common import MODEL_FILE, save_io

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# transformers and timm import torchvision whenever it is installed: make that import work here
# too (`zoo build` imports this script without the test suite's hook); nothing is imported yet
torchvision_shim.install_import_hook()

VOCAB, SEQ = 64, 8
ORDER_ONE = (0.3, 1e4)  # an output's largest magnitude must lie in this range


@dataclass(frozen=True)
class Arch:
    family: str
    framework: str
    make: Callable[[], tuple[Any, Any]]
    about: str
    options: dict[str, Any] = field(default_factory=dict)
    heavy: bool = False


ARCHS: dict[str, Arch] = {}


def _register(name: str, family: str, framework: str, about: str, *, heavy: bool = False,
              **options: Any) -> Callable[[Callable[[], tuple[Any, Any]]], Callable[[], tuple[Any, Any]]]:
    def wrap(make: Callable[[], tuple[Any, Any]]) -> Callable[[], tuple[Any, Any]]:
        if name in ARCHS:
            raise ValueError(f"architecture {name!r} registered twice")
        ARCHS[name] = Arch(family, framework, make, about, options, heavy)
        return make
    return wrap


# -- perturbation and the order-one check -------------------------------------------------------

def perturb_torch(model: Any, scale: float = 0.5, seed: int = 1) -> Any:
    """Add seeded noise of ``scale`` times each parameter's own spread (HF's 0.02-std init gives
    small, flat outputs); running statistics of norms are left alone."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            spread = float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 0.1
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * spread * scale)
    return model.eval()


def settle_torch(model: Any, samples: Any, target: float = 3.0) -> Any:
    """Make a perturbed model's outputs of order 1 without changing its architecture.

    BatchNorm layers get running statistics measured on a calibration batch (a fresh init keeps mean 0,
    variance 1, so deep CNNs shrink or blow up their activations in eval mode); then, while the
    first output's scale is outside ``ORDER_ONE``, the layer that computes it (the last Linear or
    Conv whose output has that shape, else the last one called) is rescaled towards ``target``."""
    import torch

    calibrate_batchnorm(model, _calibration_batch(samples))
    for _ in range(4):
        outs, called = _call_with_layers(model, samples)
        first = next(o for o in outs if o.is_floating_point() and o.numel() > 1)
        scale = float(first.abs().max())
        if ORDER_ONE[0] < scale < ORDER_ONE[1] / 100:
            break
        same = [m for m, shape in called if shape == tuple(first.shape)]
        layer = (same or [m for m, _ in called])[-1]
        with torch.no_grad():
            for p in layer.parameters(recurse=False):
                p.mul_(target / max(scale, 1e-6))
    return model.eval()


def calibrate_batchnorm(model: Any, samples: Any) -> None:
    """BatchNorm running statistics measured on ``samples`` in one call (the rest of the model
    stays in eval mode): a fresh init keeps mean 0 and variance 1, so deep CNNs shrink or blow up
    their activations in eval mode, and a detector's head then sees dead features whose class
    scores tie exactly."""
    from torch import nn

    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    model.eval()
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average
        m.train()
    _call_torch(model, samples)
    for m in norms:
        m.eval()


CALIBRATION_IMAGES = 32


def _calibration_batch(samples: Any) -> Any:
    """What BatchNorm statistics are measured on: for image-like float inputs, the samples plus
    seeded inputs of the same shape and range, ``CALIBRATION_IMAGES`` rows in one batch; other
    inputs as given. Two 64x64 samples leave a deep CNN's last stages a handful of values per
    channel and near-zero variances that amplify any rounding, which no trained network has."""
    import torch

    if isinstance(samples, dict) or not all(isinstance(t, torch.Tensor) and t.is_floating_point()
                                            and t.ndim >= 3 for t in samples):
        return samples
    gen = torch.Generator().manual_seed(11)
    extra = CALIBRATION_IMAGES - samples[0].shape[0]
    return tuple(torch.cat([t, t.min() + (t.max() - t.min()) * torch.rand((extra, *t.shape[1:]), generator=gen,
                                                                            dtype=t.dtype)])
                 for t in samples)


def _call_torch(model: Any, samples: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(**samples) if isinstance(samples, dict) else model(*samples)


def _call_with_layers(model: Any, samples: Any) -> tuple[list[Any], list[tuple[Any, tuple[int, ...]]]]:
    """The model's tensor outputs, and each Linear/Conv called with its output's shape, in order."""
    import torch
    from torch import nn

    called: list[tuple[Any, tuple[int, ...]]] = []
    hooks = [m.register_forward_hook(lambda mod, _i, out: called.append((mod, tuple(out.shape))))
             for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d))]
    try:
        out = _call_torch(model, samples)
    finally:
        for h in hooks:
            h.remove()
    return [t for t in _leaves(out) if isinstance(t, torch.Tensor)], called


def perturb_keras(model: Any, scale: float = 0.5, seed: int = 1) -> Any:
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if not w.trainable:  # BatchNorm moving statistics stay as built
            continue
        value = np.asarray(w.numpy())
        spread = float(value.std()) if value.size > 1 and value.std() > 0 else 0.1
        w.assign(value + rng.standard_normal(value.shape).astype(value.dtype) * spread * scale)
    return model


def settle_keras(model: Any, samples: Any, target: float = 3.0) -> Any:
    """As :func:`settle_torch` for Keras: while the first output's scale is outside ``ORDER_ONE``,
    the last layer with a kernel (the head) is rescaled towards ``target``."""
    heads = [layer for layer in _keras_layers(model) if getattr(layer, "kernel", None) is not None]
    for _ in range(4):
        floats = [o for o in keras_outputs(model, samples) if o.size > 1]
        scale = float(np.abs(floats[0]).max())
        if ORDER_ONE[0] < scale < ORDER_ONE[1] / 100 or not heads:
            break
        for w in heads[-1].weights:
            w.assign(np.asarray(w.numpy()) * (target / max(scale, 1e-6)))
    return model


def _keras_layers(model: Any) -> list[Any]:
    """Every layer, depth first, in the order the model lists them."""
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        found.extend(_keras_layers(layer))
    return found


def torch_outputs(model: Any, samples: Any) -> list[np.ndarray]:
    """Every floating output the model returns for ``samples`` (nested structures flattened)."""
    import torch

    with torch.no_grad():
        out = model(**samples) if isinstance(samples, dict) else model(*samples)
    return [t.detach().float().numpy() for t in _leaves(out) if isinstance(t, torch.Tensor)]


def keras_outputs(model: Any, samples: Any) -> list[np.ndarray]:
    out = model(samples, training=False)
    return [np.asarray(t, dtype=np.float32) for t in _leaves(out)]


def _leaves(out: Any) -> list[Any]:
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [leaf for item in out for leaf in _leaves(item)]
    return [out]


def assert_order_one(outputs: list[np.ndarray], name: str) -> None:
    """The first floating output must be of order 1 and vary; never ~0 or constant."""
    floats = [o for o in outputs if np.issubdtype(o.dtype, np.floating) and o.size > 1]
    if not floats:
        raise AssertionError(f"{name}: no floating output to check parity on")
    first = floats[0]
    scale = float(np.abs(first).max())
    if not (ORDER_ONE[0] < scale < ORDER_ONE[1]) or not np.isfinite(first).all():
        raise AssertionError(f"{name}: outputs of scale {scale}: parity would prove little")
    if float(first.std()) < 0.01 * scale:
        raise AssertionError(f"{name}: outputs nearly constant (std {first.std():.3g})")


def build_checked(name: str) -> tuple[Any, Any]:
    """The model and its samples, with the order-one assertion made."""
    arch = ARCHS[name]
    model, samples = arch.make()
    outs = torch_outputs(model, samples) if arch.framework == "torch" else keras_outputs(model, samples)
    assert_order_one(outs, name)
    return model, samples


# -- Hugging Face transformers ------------------------------------------------------------------

SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
             intermediate_size=64, max_position_embeddings=32)


def _tokens(seed: int = 2, decoder: bool = False, mask: bool = True) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    samples: dict[str, Any] = {"input_ids": torch.randint(3, VOCAB, (1, SEQ), generator=gen)}
    if mask:
        attention = torch.ones(1, SEQ, dtype=torch.long)
        attention[0, SEQ - 2:] = 0  # padding, so the attention mask matters
        samples["attention_mask"] = attention
    if decoder:
        samples["decoder_input_ids"] = torch.randint(3, VOCAB, (1, 5), generator=gen)
    return samples


def _hf(factory: Callable[[Any], Any], config: Any, samples: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    return settle_torch(perturb_torch(factory(config)), samples), samples


def _image_tensor(size: int = 32, batch: int = 1, seed: int = 3) -> Any:
    import torch

    return torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


@_register("hf_bert", "hf-encoder", "torch", "BertModel")
def hf_bert() -> tuple[Any, Any]:
    import transformers as T
    return _hf(T.BertModel, T.BertConfig(**SMALL), _tokens())


@_register("hf_distilbert", "hf-encoder", "torch", "DistilBertModel")
def hf_distilbert() -> tuple[Any, Any]:
    import transformers as T
    config = T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=1, n_heads=4, hidden_dim=64,
                                max_position_embeddings=32)
    return _hf(T.DistilBertModel, config, _tokens())


@_register("hf_roberta", "hf-encoder", "torch", "RobertaModel (position ids from the padding)")
def hf_roberta() -> tuple[Any, Any]:
    import transformers as T
    return _hf(T.RobertaModel, T.RobertaConfig(**{**SMALL, "max_position_embeddings": 40}), _tokens())


@_register("hf_albert", "hf-encoder", "torch", "AlbertModel (factorized embedding, shared layers)")
def hf_albert() -> tuple[Any, Any]:
    import transformers as T
    return _hf(T.AlbertModel, T.AlbertConfig(**SMALL, embedding_size=16), _tokens())


@_register("hf_deberta_v2", "hf-encoder", "torch", "DebertaV2Model (disentangled relative attention)")
def hf_deberta_v2() -> tuple[Any, Any]:
    import transformers as T
    config = T.DebertaV2Config(**SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"],
                               position_buckets=16, max_relative_positions=32)
    return _hf(T.DebertaV2Model, config, _tokens())


@_register("hf_electra", "hf-encoder", "torch", "ElectraModel (embedding projection)")
def hf_electra() -> tuple[Any, Any]:
    import transformers as T
    return _hf(T.ElectraModel, T.ElectraConfig(**SMALL, embedding_size=16), _tokens())


def _decoder(kind: str, use_cache: bool) -> tuple[Any, Any]:
    """A causal LM of ``kind``; with ``use_cache`` its config keeps the cache (the with-cache
    variants export it as past_key_values in, present out: ``kv_cache=True``)."""
    import transformers as T

    common = dict(use_cache=use_cache)
    small = dict(SMALL, max_position_embeddings=128)  # room for the past the cache's parity feeds add
    gqa = dict(small, num_key_value_heads=2, **common)
    factories: dict[str, tuple[Any, Any]] = {
        "gpt2": (T.GPT2LMHeadModel, lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4,
                                                          n_positions=128, bos_token_id=1, eos_token_id=2,
                                                          **common)),
        "llama": (T.LlamaForCausalLM, lambda: T.LlamaConfig(**gqa)),
        "qwen2": (T.Qwen2ForCausalLM, lambda: T.Qwen2Config(**gqa)),
        "mistral": (T.MistralForCausalLM, lambda: T.MistralConfig(**gqa, sliding_window=None)),
        "phi3": (T.Phi3ForCausalLM, lambda: T.Phi3Config(**small, num_key_value_heads=4, pad_token_id=0,
                                                         bos_token_id=1, eos_token_id=2, **common)),
        "gemma": (T.GemmaForCausalLM, lambda: T.GemmaConfig(**gqa, head_dim=8)),
    }
    factory, config = factories[kind]
    return _hf(factory, config(), _tokens())


DECODERS = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM (GQA, RoPE)", "qwen2": "Qwen2ForCausalLM",
            "mistral": "MistralForCausalLM", "phi3": "Phi3ForCausalLM (fused qkv)",
            "gemma": "GemmaForCausalLM (GeGLU, scaled embedding)"}
for _kind, _about in DECODERS.items():
    _register(f"hf_{_kind}", "hf-decoder", "torch", f"{_about} without KV cache")(
        lambda k=_kind: _decoder(k, use_cache=False))
    _register(f"hf_{_kind}_kv", "hf-decoder-kv", "torch", f"{_about} with its KV cache as inputs/outputs",
              kv_cache=True)(lambda k=_kind: _decoder(k, use_cache=True))


@_register("hf_t5", "hf-encoder-decoder", "torch", "T5Model (relative position buckets)")
def hf_t5() -> tuple[Any, Any]:
    import transformers as T
    config = T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                        use_cache=False)
    return _hf(T.T5Model, config, _tokens(decoder=True))


@_register("hf_bart", "hf-encoder-decoder", "torch", "BartModel")
def hf_bart() -> tuple[Any, Any]:
    import transformers as T
    config = T.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                          decoder_ffn_dim=64, max_position_embeddings=32, use_cache=False)
    return _hf(T.BartModel, config, _tokens(decoder=True))


@_register("hf_whisper", "hf-encoder-decoder", "torch", "WhisperModel: audio encoder and its text decoder")
def hf_whisper() -> tuple[Any, Any]:
    import torch
    import transformers as T
    config = T.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=1,
                             decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
                             encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
                             max_target_positions=16, use_cache=False, pad_token_id=0, bos_token_id=1,
                             eos_token_id=2, decoder_start_token_id=1)
    gen = torch.Generator().manual_seed(2)
    samples = {"input_features": torch.randn(1, 16, 32, generator=gen),
               "decoder_input_ids": torch.randint(3, VOCAB, (1, 5), generator=gen)}
    return _hf(T.WhisperModel, config, samples)


@_register("hf_wav2vec2", "hf-audio", "torch", "Wav2Vec2Model (conv feature encoder, conv positions)")
def hf_wav2vec2() -> tuple[Any, Any]:
    import torch
    import transformers as T
    config = T.Wav2Vec2Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                              intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                              conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                              num_conv_pos_embedding_groups=4, do_stable_layer_norm=False)
    samples = {"input_values": torch.randn(1, 800, generator=torch.Generator().manual_seed(2))}
    return _hf(T.Wav2Vec2Model, config, samples)


VIT = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=1,
           num_attention_heads=4, intermediate_size=64)


@_register("hf_vit", "hf-vision", "torch", "ViTModel")
def hf_vit() -> tuple[Any, Any]:
    import transformers as T
    return _hf(T.ViTModel, T.ViTConfig(**VIT), {"pixel_values": _image_tensor()})


@_register("hf_deit", "hf-vision", "torch", "DeiTForImageClassificationWithTeacher (distillation token)")
def hf_deit() -> tuple[Any, Any]:
    import transformers as T
    return _hf(T.DeiTForImageClassificationWithTeacher, T.DeiTConfig(**VIT, num_labels=10),
               {"pixel_values": _image_tensor()})


@_register("hf_swin", "hf-vision", "torch", "SwinModel (shifted windows)")
def hf_swin() -> tuple[Any, Any]:
    import transformers as T
    config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                          window_size=4)
    return _hf(T.SwinModel, config, {"pixel_values": _image_tensor()})


@_register("hf_beit", "hf-vision", "torch", "BeitModel (relative position bias, layer scale)")
def hf_beit() -> tuple[Any, Any]:
    import transformers as T
    config = T.BeitConfig(**VIT, use_relative_position_bias=True, use_mean_pooling=True)
    return _hf(T.BeitModel, config, {"pixel_values": _image_tensor()})


@_register("hf_segformer", "hf-vision", "torch", "SegformerForSemanticSegmentation (Mix Transformer)")
def hf_segformer() -> tuple[Any, Any]:
    import transformers as T
    config = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                               patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                               mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5)
    return _hf(T.SegformerForSemanticSegmentation, config, {"pixel_values": _image_tensor(64)})


@_register("hf_detr", "hf-vision", "torch", "DetrForObjectDetection (ResNet backbone, set prediction)")
def hf_detr() -> tuple[Any, Any]:
    import transformers as T
    backbone = T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
                              out_features=["stage2"])
    config = T.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
                          d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                          num_queries=10, num_labels=5)
    return _hf(T.DetrForObjectDetection, config, {"pixel_values": _image_tensor(64)})


# -- torchvision (through the import shim) and timm ---------------------------------------------

def _tv() -> Any:
    return torchvision_shim.import_torchvision()


def _vision(model: Any, size: int = 64, scale: float = 0.3) -> tuple[Any, Any]:
    samples = (_image_tensor(size, batch=2),)
    return settle_torch(perturb_torch(model, scale=scale), samples), samples


def _tv_classifier(factory: str, size: int = 64, **kwargs: Any) -> tuple[Any, Any]:
    import torch
    tv = _tv()
    torch.manual_seed(0)
    return _vision(getattr(tv.models, factory)(weights=None, num_classes=10, **kwargs), size)


for _name, _size, _kw in [("resnet18", 64, {}), ("mobilenet_v3_small", 64, {}), ("efficientnet_b0", 64, {}),
                          ("regnet_y_400mf", 64, {}), ("convnext_tiny", 64, {}), ("squeezenet1_1", 64, {}),
                          ("shufflenet_v2_x0_5", 64, {}), ("densenet121", 64, {}), ("mnasnet0_5", 64, {}),
                          ("googlenet", 64, {"aux_logits": False, "init_weights": True}),
                          ("inception_v3", 96, {"aux_logits": False, "init_weights": True}),
                          ("swin_t", 64, {})]:
    _register(f"tv_{_name}", "torchvision-classification", "torch", f"torchvision.models.{_name}")(
        lambda f=_name, s=_size, kw=_kw: _tv_classifier(f, s, **kw))


@_register("tv_vit", "torchvision-classification", "torch", "torchvision VisionTransformer (small config)")
def tv_vit() -> tuple[Any, Any]:
    import torch
    from torchvision.models.vision_transformer import VisionTransformer
    _tv()
    torch.manual_seed(0)
    return _vision(VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                     mlp_dim=64, num_classes=10), 32)


def _tv_segmentation(factory: str) -> tuple[Any, Any]:
    import torch
    tv = _tv()
    torch.manual_seed(0)
    model = getattr(tv.models.segmentation, factory)(weights=None, weights_backbone=None, num_classes=5)
    return _vision(model, 64)


for _name in ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50"):
    _register(f"tv_{_name}", "torchvision-segmentation", "torch", f"torchvision.models.segmentation.{_name}")(
        lambda f=_name: _tv_segmentation(f))


def _tv_detection(factory: str, size: int, **kwargs: Any) -> tuple[Any, Any]:
    """A detector with few candidates kept (random weights give many near-equal scores, whose
    order is arbitrary), BatchNorm statistics measured on 8 seeded images and class logits of
    unit spread, so the scores spread (SSDLite's tied exactly before: dead features)."""
    import torch
    tv = _tv()
    torch.manual_seed(0)
    model = getattr(tv.models.detection, factory)(weights=None, weights_backbone=None, num_classes=3, **kwargs)
    perturb_torch(model, scale=0.3)
    image = torch.rand(3, size, size, generator=torch.Generator().manual_seed(2))
    gen = torch.Generator().manual_seed(11)
    calibrate_batchnorm(model, ([image, *(torch.rand(3, size, size, generator=gen) for _ in range(7))],))
    _spread_scores(model, [image])
    return model.eval(), ([image],)


def _spread_scores(model: Any, images: list[Any]) -> None:
    """Rescale the layers that write the class logits so the logits have unit spread: perturbed
    weights gave SSD300 logits of std 7 and max 45, a softmax of exactly 1.0 for every kept
    box, and so a kept set that depends on how each runtime orders ties. RetinaNet's (sigmoid)
    logits are also centred on 0."""
    import torch
    from torch import nn

    head = getattr(getattr(model, "head", None), "classification_head", None)
    if head is None:
        return
    if hasattr(head, "cls_logits"):  # RetinaNet
        finals = [head.cls_logits]
    else:  # SSD, SSDLite: one branch per feature map, the logits from its last conv
        finals = [[c for c in branch.modules() if isinstance(c, nn.Conv2d)][-1] for branch in head.module_list]
    seen: list[Any] = []
    hook = head.register_forward_hook(lambda _m, _i, out: seen.append(out))
    try:
        with torch.no_grad():
            model.eval()(images)
    finally:
        hook.remove()
    spread = max(float(seen[-1].std()), 1e-6)
    with torch.no_grad():
        for conv in finals:
            for p in conv.parameters(recurse=False):
                p.div_(spread)
        if hasattr(head, "cls_logits") and head.cls_logits.bias is not None:
            # RetinaNet scores by sigmoid, not softmax: logits of mean -165 (after the rescale)
            # left every score 0, so no box passed its threshold; centre them
            head.cls_logits.bias.sub_(float(seen[-1].mean()) / spread)


# no exporter option: unframe takes torchvision detectors to the TorchScript exporter first
# itself (dynamo refuses their data-dependent post-processing), as a user's plain call gets it
_register("tv_ssdlite", "torchvision-detection", "torch", "SSDLite320 MobileNetV3")(
    lambda: _tv_detection("ssdlite320_mobilenet_v3_large", 320, detections_per_img=8, topk_candidates=16))
_register("tv_ssd300", "torchvision-detection", "torch", "SSD300 VGG16")(
    lambda: _tv_detection("ssd300_vgg16", 300, detections_per_img=8, topk_candidates=16))
_register("tv_retinanet", "torchvision-detection", "torch", "RetinaNet ResNet50-FPN")(
    lambda: _trained_detector("retinanet_resnet50_fpn", 128, detections_per_img=8, topk_candidates=16,
                              min_size=128, max_size=128))


def _trained_detector(factory: str, size: int, steps: int = 70, **kwargs: Any) -> tuple[Any, Any]:
    """A detector whose heads were trained for a few steps on a scene of three coloured boxes
    (the backbone perturbed and frozen, its BatchNorm statistics measured): decisive scores on
    the objects and background below the score threshold, as a trained detector gives. A random
    RetinaNet kept 8 boxes whose scores all lay within 0.012 of each other (0.9545-0.9669), a set
    no 16-bit runtime can reproduce and parity could say nothing about."""
    import torch
    tv = _tv()
    torch.manual_seed(0)
    model = getattr(tv.models.detection, factory)(weights=None, weights_backbone=None, num_classes=3, **kwargs)
    perturb_torch(model, scale=0.3)
    image, target = _scene(size)
    gen = torch.Generator().manual_seed(11)
    calibrate_batchnorm(model, ([image, *(torch.rand(3, size, size, generator=gen) for _ in range(7))],))
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in model.head.parameters()], lr=1e-3)
    for _ in range(steps):
        model.train()
        model.backbone.eval()  # its BatchNorm statistics stay as measured
        loss = sum(model([image], [target]).values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), ([image],)


def _scene(size: int) -> tuple[Any, dict[str, Any]]:
    """A dim noisy image with three coloured boxes, and their boxes and labels as targets."""
    import torch

    gen = torch.Generator().manual_seed(2)
    image = 0.3 * torch.rand(3, size, size, generator=gen)
    objects = [(0.08, 0.1, 0.36, 0.4, 1), (0.5, 0.55, 0.81, 0.94, 2), (0.62, 0.08, 0.91, 0.34, 1)]
    colours = [(0.9, 0.2, 0.2), (0.2, 0.8, 0.3), (0.3, 0.3, 0.9)]
    boxes = []
    for (x1, y1, x2, y2, _), colour in zip(objects, colours, strict=True):
        a, b, c, d = (round(v * size) for v in (x1, y1, x2, y2))
        image[:, b:d, a:c] = torch.tensor(colour).view(3, 1, 1) + 0.05 * torch.rand(3, d - b, c - a, generator=gen)
        boxes.append([a, b, c, d])
    return image, {"boxes": torch.tensor(boxes, dtype=torch.float32),
                   "labels": torch.tensor([o[4] for o in objects])}
# Faster R-CNN: neither exporter takes it (dynamo: the data-dependent post-processing; TorchScript:
# torchvision's dynamo-decorated helpers), so it goes the default way a user's call would: both
# are tried, and the answer is exit 4
_register("tv_fasterrcnn", "torchvision-detection", "torch", "Faster R-CNN MobileNetV3-FPN 320")(
    lambda: _tv_detection("fasterrcnn_mobilenet_v3_large_320_fpn", 160, box_detections_per_img=8,
                          rpn_pre_nms_top_n_test=32, rpn_post_nms_top_n_test=16, min_size=160, max_size=160))


def _timm(name: str, size: int, **kwargs: Any) -> tuple[Any, Any]:
    import timm
    import torch
    _tv()  # timm imports torchvision
    torch.manual_seed(0)
    return _vision(timm.create_model(name, pretrained=False, num_classes=10, **kwargs), size)


for _name, _size, _kw in [("resnet18", 64, {}), ("efficientnet_b0", 64, {}), ("convnext_atto", 64, {}),
                          ("vit_tiny_patch16_224", 32, {"img_size": 32, "patch_size": 8}),
                          ("mobilevit_xxs", 64, {}), ("regnetx_002", 64, {})]:
    _register(f"timm_{_name}", "timm-classification", "torch", f"timm.create_model('{_name}')")(
        lambda n=_name, s=_size, kw=_kw: _timm(n, s, **kw))


# -- Keras: keras.applications, keras-hub backbones, subclassed models ------------------------------

# (factory, input size, heavy): the smallest size each architecture allows, rounded up to 32s
KERAS_APPS: list[tuple[str, int, bool]] = [
    ("ConvNeXtTiny", 32, False), ("ConvNeXtSmall", 32, True), ("ConvNeXtBase", 32, True),
    ("ConvNeXtLarge", 32, True), ("ConvNeXtXLarge", 32, True),
    ("DenseNet121", 32, False), ("DenseNet169", 32, True), ("DenseNet201", 32, True),
    ("EfficientNetB0", 32, False), ("EfficientNetB1", 32, True), ("EfficientNetB2", 32, True),
    ("EfficientNetB3", 32, True), ("EfficientNetB4", 32, True), ("EfficientNetB5", 32, True),
    ("EfficientNetB6", 32, True), ("EfficientNetB7", 32, True),
    ("EfficientNetV2B0", 32, False), ("EfficientNetV2B1", 32, True), ("EfficientNetV2B2", 32, True),
    ("EfficientNetV2B3", 32, True), ("EfficientNetV2S", 32, True), ("EfficientNetV2M", 32, True),
    ("EfficientNetV2L", 32, True),
    ("InceptionResNetV2", 75, False), ("InceptionV3", 75, False),
    ("MobileNet", 32, False), ("MobileNetV2", 32, False), ("MobileNetV3Small", 32, False),
    ("MobileNetV3Large", 32, False),
    ("NASNetMobile", 32, False), ("NASNetLarge", 32, True),
    ("ResNet50", 32, False), ("ResNet101", 32, True), ("ResNet152", 32, True),
    ("ResNet50V2", 32, False), ("ResNet101V2", 32, True), ("ResNet152V2", 32, True),
    ("VGG16", 32, False), ("VGG19", 32, True), ("Xception", 71, False),
]


def _keras_images(size: int, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(3).uniform(0, 1, (batch, size, size, 3)).astype(np.float32)


def _keras_app(factory: str, size: int) -> tuple[Any, Any]:
    import keras

    keras.utils.set_random_seed(0)
    kwargs: dict[str, Any] = {}
    if factory.startswith("MobileNetV3"):
        kwargs["include_preprocessing"] = False
    model = getattr(keras.applications, factory)(weights=None, input_shape=(size, size, 3), classes=10,
                                                 classifier_activation=None, **kwargs)
    images = _keras_images(size)
    return settle_keras(perturb_keras(model, scale=0.3), images), images


for _factory, _size, _heavy in KERAS_APPS:
    _register(f"keras_{_factory.lower()}", "keras-applications", "keras", f"keras.applications.{_factory}",
              heavy=_heavy)(lambda f=_factory, s=_size: _keras_app(f, s))


@_register("kerashub_resnet", "keras-hub", "keras", "keras_hub ResNetBackbone (v1.5 basic blocks)")
def kerashub_resnet() -> tuple[Any, Any]:
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    model = keras_hub.models.ResNetBackbone(input_conv_filters=[64], input_conv_kernel_sizes=[3],
                                            stackwise_num_filters=[64, 32], stackwise_num_blocks=[1, 1],
                                            stackwise_num_strides=[1, 2], block_type="basic_block",
                                            use_pre_activation=False, image_shape=(32, 32, 3))
    images = _keras_images(32)
    return settle_keras(perturb_keras(model, scale=0.3), images), images


@_register("kerashub_bert", "keras-hub", "keras", "keras_hub BertBackbone (token ids, segment ids, mask)")
def kerashub_bert() -> tuple[Any, Any]:
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    model = keras_hub.models.BertBackbone(vocabulary_size=VOCAB, num_layers=1, num_heads=4, hidden_dim=32,
                                          intermediate_dim=64, max_sequence_length=SEQ)
    rng = np.random.default_rng(2)
    mask = np.ones((1, SEQ), np.int32)
    mask[0, SEQ - 2:] = 0
    samples = {"token_ids": rng.integers(3, VOCAB, (1, SEQ)).astype(np.int32),
               "segment_ids": np.zeros((1, SEQ), np.int32), "padding_mask": mask}
    return settle_keras(perturb_keras(model), samples), samples


@_register("kerashub_vit", "keras-hub", "keras", "keras_hub ViTBackbone")
def kerashub_vit() -> tuple[Any, Any]:
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    model = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=1, num_heads=4,
                                         hidden_dim=32, mlp_dim=64)
    images = _keras_images(32)
    return settle_keras(perturb_keras(model), images), images


def _subclassed_classes() -> tuple[type, type]:
    import keras
    from keras import layers

    class ResidualBlock(layers.Layer):
        def __init__(self, filters: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.conv1 = layers.Conv2D(filters, 3, padding="same")
            self.norm = layers.BatchNormalization()
            self.conv2 = layers.Conv2D(filters, 3, padding="same")

        def call(self, x: Any, training: bool = False) -> Any:
            y = keras.activations.gelu(self.norm(self.conv1(x), training=training))
            return keras.activations.relu(x + self.conv2(y))

    class SubclassedCNN(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.stem = layers.Conv2D(16, 3, strides=2, padding="same")
            self.block = ResidualBlock(16)
            self.pool = layers.GlobalAveragePooling2D()
            self.head = layers.Dense(10)

        def call(self, x: Any, training: bool = False) -> Any:
            return self.head(self.pool(self.block(self.stem(x), training=training)))

    class SubclassedEncoder(keras.Model):
        """Embedding, one self-attention block with a residual and layer norms, mean pooling."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = layers.Embedding(VOCAB, 32)
            self.attn = layers.MultiHeadAttention(num_heads=4, key_dim=8)
            self.norm1 = layers.LayerNormalization()
            self.ffn = layers.Dense(32, activation="relu")
            self.norm2 = layers.LayerNormalization()
            self.head = layers.Dense(4)

        def call(self, tokens: Any) -> Any:
            x = self.embed(tokens)
            x = self.norm1(x + self.attn(x, x))
            x = self.norm2(x + self.ffn(x))
            return self.head(keras.ops.mean(x, axis=1))

    return SubclassedCNN, SubclassedEncoder


@_register("keras_subclassed_cnn", "keras-subclassed", "keras", "a keras.Model subclass with a custom residual Layer")
def keras_subclassed_cnn() -> tuple[Any, Any]:
    import keras

    keras.utils.set_random_seed(0)
    model = _subclassed_classes()[0]()
    images = _keras_images(32)
    model(images)  # builds the weights
    return settle_keras(perturb_keras(model, scale=0.3), images), images


@_register("keras_subclassed_encoder", "keras-subclassed", "keras",
           "a keras.Model subclass: embedding, multi-head attention, layer norms")
def keras_subclassed_encoder() -> tuple[Any, Any]:
    import keras

    keras.utils.set_random_seed(0)
    model = _subclassed_classes()[1]()
    tokens = np.random.default_rng(2).integers(0, VOCAB, (2, SEQ)).astype(np.int32)
    model(tokens)
    return settle_keras(perturb_keras(model), tokens), tokens


# -- issue 36: the families the held-out trial found gaps in (RAFT, MaxViT, FCOS, BLOOM, a dict-input
# keras-hub backbone, a Keras tf.range loop) ------------------------------------------------------

@_register("hf_bloom", "hf-decoder", "torch", "BloomModel (ALiBi positions from the mask's running count)")
def hf_bloom() -> tuple[Any, Any]:
    import transformers as T
    config = T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=1, n_head=4, use_cache=False)
    return _hf(T.BloomModel, config, _tokens())


@_register("tv_raft_small", "torchvision-optical-flow", "torch",
           "torchvision.models.optical_flow.raft_small (12 flow updates; correlation lookups by grid_sample)")
def tv_raft_small() -> tuple[Any, Any]:
    """Two 128x128 frames (RAFT's smallest: sides that are multiples of 8, and feature maps of
    16x16 or more for its four-level correlation pyramid), the second the first shifted by a few
    pixels, so there is a flow to find."""
    import torch
    tv = _tv()
    torch.manual_seed(0)
    model = tv.models.optical_flow.raft_small(weights=None)
    gen = torch.Generator().manual_seed(3)
    first = 2 * torch.rand(1, 3, 128, 128, generator=gen) - 1
    second = torch.roll(first, shifts=(2, 3), dims=(2, 3)) + 0.05 * torch.randn(1, 3, 128, 128, generator=gen)
    samples = (first, second)
    return settle_torch(perturb_torch(model, scale=0.3), samples), samples


@_register("tv_maxvit", "torchvision-classification", "torch",
           "torchvision MaxVit (maxvit_t's blocks at a small config: block and grid attention, rank-6 partitions)")
def tv_maxvit() -> tuple[Any, Any]:
    """maxvit_t itself takes 224x224 only (7x7 partitions of every stage); the class at 64x64 with
    4x4 partitions and two stages keeps every kind of layer (MBConv, window and grid attention with
    relative position bias)."""
    import torch
    from torchvision.models.maxvit import MaxVit
    _tv()
    torch.manual_seed(0)
    model = MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4, block_channels=[32, 64],
                   block_layers=[1, 1], head_dim=16, stochastic_depth_prob=0.0, num_classes=10)
    return _vision(model, 64)


@_register("tv_fcos", "torchvision-detection", "torch", "FCOS ResNet50-FPN (GroupNorm heads)", heavy=True)
def tv_fcos() -> tuple[Any, Any]:
    # trained heads, as RetinaNet's: random ones keep boxes whose scores tie within fp16's tolerance.
    # heavy: the training makes the build take minutes (99 s alone, 369 s on a loaded 2-core machine)
    return _trained_detector("fcos_resnet50_fpn", 128, detections_per_img=8, topk_candidates=16,
                             min_size=128, max_size=128)


@_register("kerashub_gemma", "keras-hub", "keras", "keras_hub GemmaBackbone (token ids and padding mask as a dict)")
def kerashub_gemma() -> tuple[Any, Any]:
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    model = keras_hub.models.GemmaBackbone(vocabulary_size=VOCAB, num_layers=1, num_query_heads=4,
                                           num_key_value_heads=2, hidden_dim=32, intermediate_dim=64, head_dim=8)
    return settle_keras(perturb_keras(model), _hub_tokens()), _hub_tokens()


def _hub_tokens() -> dict[str, np.ndarray]:
    """keras-hub's text inputs: token ids and a padding mask (two padded positions, so it matters)."""
    mask = np.ones((1, SEQ), np.int32)
    mask[0, SEQ - 2:] = 0
    return {"token_ids": np.random.default_rng(2).integers(3, VOCAB, (1, SEQ)).astype(np.int32),
            "padding_mask": mask}


@_register("keras_dict_inputs", "keras-functional", "keras",
           "a functional keras.Model with dict inputs named as keras-hub's (token_ids, padding_mask)")
def keras_dict_inputs() -> tuple[Any, Any]:
    """keras-hub's input convention without keras-hub (not installed everywhere): a dict of two
    named inputs, the mask used by the attention."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    tokens = keras.Input((SEQ,), dtype="int32", name="token_ids")
    padding = keras.Input((SEQ,), dtype="int32", name="padding_mask")
    x = layers.Embedding(VOCAB, 32)(tokens)
    mask = keras.ops.expand_dims(keras.ops.cast(padding, "bool"), 1)
    x = layers.LayerNormalization()(x + layers.MultiHeadAttention(num_heads=4, key_dim=8)(x, x, attention_mask=mask))
    x = layers.LayerNormalization()(x + layers.Dense(32, activation="gelu")(x))
    model = keras.Model({"token_ids": tokens, "padding_mask": padding}, layers.Dense(16)(x))
    return settle_keras(perturb_keras(model), _hub_tokens()), _hub_tokens()


def _range_loop_class() -> type:
    import keras
    import tensorflow as tf
    from keras import layers

    class RangeLoopRNN(keras.Model):
        """A recurrent cell stepped by ``for t in tf.range(STEPS)``: eager Python iteration when
        called, a while loop once tf.function's autograph traces it (tf2onnx: a Loop)."""

        def __init__(self) -> None:
            super().__init__()
            self.step_in = layers.Dense(16)
            self.step_state = layers.Dense(16, use_bias=False)
            self.head = layers.Dense(4)

        def build(self, shape: Any) -> None:
            # built before the first call: the loop runs in a tf.function, which may not create variables
            self.step_in.build((shape[0], shape[2]))
            self.step_state.build((shape[0], 16))
            self.head.build((shape[0], 16))

        def call(self, x: Any) -> Any:
            return self.head(self.steps(x))

        @tf.function  # autograph (Keras 3 doesn't convert `call` itself): the loop becomes a while loop
        def steps(self, x: Any) -> Any:
            state = tf.zeros((tf.shape(x)[0], 16), x.dtype)
            for t in tf.range(LOOP_STEPS):
                state = tf.tanh(self.step_in(x[:, t]) + self.step_state(state))
            return state

    return RangeLoopRNN


LOOP_STEPS = 12


@_register("keras_range_loop", "keras-subclassed", "keras",
           "a keras.Model subclass whose call runs `for t in tf.range(12)` over a sequence (a while loop)")
def keras_range_loop() -> tuple[Any, Any]:
    import keras

    keras.utils.set_random_seed(0)
    model = _range_loop_class()()
    sequence = np.random.default_rng(2).uniform(-1, 1, (2, LOOP_STEPS, 8)).astype(np.float32)
    model(sequence)
    return settle_keras(perturb_keras(model), sequence), sequence


# -- the manifest's builders --------------------------------------------------------------------

def build(name: str, out_dir: Path, opset: int) -> None:
    """Export ``name`` through unframe at ``opset`` (checked against the framework) and save its
    sample inputs and the framework's outputs, keyed by the ONNX names."""
    import unframe

    arch = ARCHS[name]
    model, samples = build_checked(name)
    result = unframe.convert(model, to="onnx", sample_inputs=samples, opset=opset,
                             output=out_dir / MODEL_FILE, **arch.options)
    if not result.report:
        raise AssertionError(f"{name}: {result.report}")
    graph = result.model.graph
    feeds = _feeds(samples, [v.name for v in graph.inputs])
    outputs = torch_outputs(model, samples) if arch.framework == "torch" else keras_outputs(model, samples)
    names = [v.name for v in graph.outputs]
    save_io(out_dir, feeds, dict(zip(names, outputs, strict=False)))
    if arch.framework == "keras":
        model.save(str(out_dir / "model.keras"))


def _feeds(samples: Any, names: list[str]) -> dict[str, np.ndarray]:
    if isinstance(samples, dict):
        values = list(samples.values())
    elif isinstance(samples, np.ndarray):  # one Keras input
        values = [samples]
    else:
        values = _leaves(list(samples))
    arrays = [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in values]
    return dict(zip(names, arrays, strict=False))


def __getattr__(attr: str) -> Callable[[Path, int], None]:
    """``arch_models.py:build_<name>`` in the manifest: the builder of that architecture."""
    name = attr.removeprefix("build_")
    if attr.startswith("build_") and name in ARCHS:
        return lambda out_dir, opset: build(name, out_dir, opset)
    raise AttributeError(attr)

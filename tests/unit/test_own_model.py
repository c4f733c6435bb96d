"""One's own torch.nn.Module as the model: built from its target and the task's sizes, checked
with one forward pass before any node trains, split for the rules that need features."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from fl_system.config.compose import CONF_DIR
from fl_system.config.overrides import rewrite
from fl_system.learning.model_parts import forward_parts
from fl_system.learning.own_model import check_model, instantiate_model
from fl_system.settings.value_checks import ConfigError

MOON_NEEDS = "contrasts the model's penultimate features"


class Plain(nn.Module):
    """No features/classifier children: only a forward that returns logits."""

    def __init__(self, input_shape, num_classes, width=8):
        super().__init__()
        size = 1
        for v in input_shape:
            size *= v
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(size, width), nn.ReLU())
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class Normed(nn.Module):
    def __init__(self, *, num_classes: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten())
        self.out = nn.LazyLinear(num_classes)

    def forward(self, x):
        return self.out(self.conv(x))


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = nn.Parameter(torch.zeros(1, dtype=torch.long), requires_grad=False)
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x)


def factory(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(4, num_classes))


def _node(target: str, **kwargs) -> OmegaConf:
    return OmegaConf.create(
        {"name": "custom", "_target_": target, "feature_layer": None, "source": None, **kwargs}
    )


def test_the_task_sizes_go_to_a_constructor_or_factory_that_asks_for_them():
    model = instantiate_model(_node(f"{__name__}.Plain", width=5), [1, 2, 2], 3)
    assert model.head.out_features == 3 and model.body[1].in_features == 4
    assert model.body[1].out_features == 5
    normed = instantiate_model(_node(f"{__name__}.Normed"), [1, 6, 6], 4)  # no input_shape
    assert normed.out.out_features == 4
    made = instantiate_model(_node(f"{__name__}.factory"), [4], 2)
    assert isinstance(made, nn.Sequential) and made[1].out_features == 2


def test_a_model_that_cannot_be_built_is_named_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        instantiate_model(_node(f"{__name__}.Plain", depth=3), [4], 2)
    assert str(err.value) == (
        f"model.depth is not an argument of {__name__}.Plain(input_shape, num_classes, width=8)"
    )
    with pytest.raises(ConfigError) as err:
        instantiate_model(_node("nomodule_here.Net"), [4], 2)
    assert str(err.value) == (
        "model._target_=nomodule_here.Net: cannot import nomodule_here (No module named "
        "'nomodule_here'); looked in the installed packages: install it on every node (pip "
        "install), or name its file with model.source=path/to/nomodule_here.py"
    )
    (tmp_path / "shipped.py").write_text(
        "from torch import nn\nclass Net(nn.Linear):\n"
        "    def __init__(self, num_classes):\n        super().__init__(4, num_classes)\n"
        "def broken(num_classes):\n    raise RuntimeError('no weights file')\n"
        "def not_a_model():\n    return 3\n"
    )
    source = str(tmp_path / "shipped.py")
    assert instantiate_model(_node("shipped.Net", source=source), [4], 2).out_features == 2
    with pytest.raises(
        ConfigError,
        match=r"^model\._target_=shipped\.broken: building it failed: "
        r"RuntimeError: no weights file$",
    ):
        instantiate_model(_node("shipped.broken", source=source), [4], 2)
    with pytest.raises(ConfigError, match=r"gave a int, not a torch\.nn\.Module$"):
        instantiate_model(_node("shipped.not_a_model", source=source), [4], 2)
    with pytest.raises(ConfigError, match=r"needs the model's class or factory"):
        instantiate_model(_node(None), [4], 2)


def test_one_forward_pass_checks_the_model_against_the_task():
    plain = Plain([1, 2, 2], 3)
    assert check_model(plain, [1, 2, 2], 3) == (
        "model Plain: 67 parameters, 0.3 KiB with its buffers"
    )
    with pytest.raises(ConfigError) as err:
        check_model(plain, [1, 2, 2], 10)
    assert str(err.value).startswith(
        "model Plain returns [2, 3] for a batch of 2; the task needs [2, 10]"
    )
    with pytest.raises(ConfigError) as err:
        check_model(plain, [1, 3, 3], 3)
    ours, _, torchs = str(err.value).partition("RuntimeError: ")
    assert ours == (
        "model Plain: its forward fails on a batch of shape [2, 1, 3, 3] (the task's input "
        "shape [1, 3, 3]): "
    )
    assert "mat1 and mat2 shapes cannot be multiplied" in torchs  # torch's words (2.15: "addmm: ")
    with pytest.raises(ConfigError, match=r"parameter steps is torch\.int64, not floating point"):
        check_model(Counting(), [4], 2)
    assert plain.training  # the check leaves the model as it found it


def test_a_rule_that_needs_features_is_told_how_to_get_them():
    plain = Plain([4], 2)
    with pytest.raises(ConfigError) as err:
        check_model(plain, [4], 2, needs_features=MOON_NEEDS, who="algorithm=moon")
    assert str(err.value) == (
        f"algorithm=moon {MOON_NEEDS}; Plain has neither (its children: body, body.0, "
        "body.1, body.2, head)"
    )
    with pytest.raises(ConfigError, match=r"^model\.feature_layer=neck: Plain has no such child"):
        check_model(plain, [4], 2, feature_layer="neck", needs_features=MOON_NEEDS)
    check_model(plain, [4], 2, feature_layer="body", needs_features=MOON_NEEDS)


def test_features_come_from_the_named_child_or_the_zoos_split():
    plain = Plain([4], 2, width=3)
    x = torch.randn(5, 4)
    logits, features = forward_parts("body")(plain, x)
    torch.testing.assert_close(features, plain.body(x))
    torch.testing.assert_close(logits, plain(x))
    assert forward_parts()(plain, x)[1] is None
    shared = nn.Linear(4, 4)
    twice = nn.Sequential(shared, nn.ReLU(), shared)
    with pytest.raises(ValueError, match="ran 2 times in one forward pass"):
        forward_parts("0")(twice, x)


def test_an_own_models_keyword_arguments_need_no_plus():
    args = ["model=custom", "model._target_=pkg.Net", "model.width=64", "model.feature_layer=x"]
    assert rewrite(args, {}, CONF_DIR) == [
        "model=custom",
        "model._target_=pkg.Net",
        "+model.width=64",
        "model.feature_layer=x",
    ]
    assert rewrite(["model.width=64"], {}, CONF_DIR) == ["model.width=64"]  # a zoo model's key


def test_a_node_is_refused_by_the_first_difference_of_its_model():
    from flwr.app import Message
    from omegaconf import OmegaConf

    from client_app.handshake import handshake_reply
    from client_app.local_data import NodeIdentity
    from fl_system.learning.own_model import fingerprint, first_difference
    from server_app.node_model_check import ModelCheck
    from server_app.rounds import NodeRefused

    ours = fingerprint(Plain([4], 2))
    assert first_difference(ours, fingerprint(Plain([4], 2))) is None
    assert first_difference(ours, fingerprint(Plain([4], 2, width=5))) == (
        "layer body.1.weight is [5, 4] torch.float32 there, [8, 4] torch.float32 here"
    )
    assert first_difference(ours, fingerprint(Plain([4], 3))).startswith("layer head.weight")
    assert first_difference(ours, fingerprint(factory(2))) == (
        f"its model is torch.nn.modules.container.Sequential, the run's {__name__}.Plain"
    )

    cfg = OmegaConf.create(
        {
            "seed": 0,
            "model": {"name": "custom", "_target_": f"{__name__}.Plain", "source": None},
            "dataset": {"input_shape": [4], "num_classes": 2, "name": "digits"},
        }
    )
    check = ModelCheck(cfg)
    node = NodeIdentity(partition_id=3, num_partitions=4, name="clinic-b")

    def reply(build):
        content = handshake_reply(cfg, node, build, lambda: (), lambda: ())
        return Message(content, dst_node_id=1, message_type="query")

    assert check(3, reply(lambda: Plain([4], 2))) is None
    with pytest.raises(NodeRefused) as err:
        check(3, reply(lambda: Plain([4], 2, width=16)))
    assert str(err.value) == (
        "node clinic-b: builds another model than the server: layer body.1.weight is [16, 4] "
        "torch.float32 there, [8, 4] torch.float32 here"
    )

    # model=app: the nodes' ClientApps build the model; the first node's is the reference
    from_app = ModelCheck(OmegaConf.merge(cfg, {"model": {"name": "app", "_target_": None}}))
    assert from_app(0, reply(lambda: Plain([4], 2))) is None
    assert from_app(1, reply(lambda: Plain([4], 2))) is None
    with pytest.raises(NodeRefused) as err:
        from_app(2, reply(lambda: Plain([4], 2, width=16)))
    assert str(err.value) == (
        "node clinic-b: builds another model than node clinic-b: layer body.1.weight is "
        "[16, 4] torch.float32 there, [8, 4] torch.float32 here"
    )

    def missing():
        raise ConfigError("model._target_=pkg.Net: cannot import pkg (No module named 'pkg')")

    with pytest.raises(NodeRefused) as err:
        check(3, reply(missing))
    assert str(err.value) == (
        "node clinic-b: cannot build the run's model: model._target_=pkg.Net: cannot import "
        "pkg (No module named 'pkg') (install the model's package on that node)"
    )


def test_model_source_is_shipped_into_the_staged_app_and_its_fab_include(tmp_path):
    import tomllib

    from fl_system.learning.own_model import SHIPPED, ship_source

    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text(
        '[tool.flwr.app]\npublisher = "p"\nfab-include = ["client_app/**/*.py"]\n'
    )
    (tmp_path / "nets.py").write_text("X = 1\n")
    ship_source(str(tmp_path / "nets.py"), app)
    assert (app / SHIPPED / "nets.py").read_text() == "X = 1\n"
    included = tomllib.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert included["fab-include"] == ["client_app/**/*.py", f"{SHIPPED}/**/*.py"]
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "m.py").write_text("Y = 2\n")
    (package / "__pycache__").mkdir()
    ship_source(str(package), app)  # a folder: its contents, the file shipped before gone
    shipped = sorted(p.relative_to(app / SHIPPED).as_posix() for p in (app / SHIPPED).rglob("*"))
    assert shipped == ["sub", "sub/m.py"]

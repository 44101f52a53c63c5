"""The one registry mechanism: lazy entries import on first lookup, order is registration order, a miss
names the closest valid entry, a name is added once."""
import pytest

from acceptmoe.errors import UserError
from acceptmoe.registry import Registry, UnknownName


def test_lazy_entry_imports_on_first_lookup_and_keeps_its_place():
    reg = Registry("codec")
    reg.add("first", 1)
    reg.lazy("decoder", "json:JSONDecoder")
    reg.add("last", 3)
    assert reg.names() == ("first", "decoder", "last")
    import json
    assert reg["decoder"] is json.JSONDecoder
    assert reg.names() == ("first", "decoder", "last")
    assert "decoder" in reg and len(reg) == 3 and reg.get("nope") is None


def test_a_miss_is_a_user_error_with_the_closest_name():
    reg = Registry("model family", fix="see docs/models.md")
    for name in ("mixtral", "olmoe", "qwen3_moe"):
        reg.add(name, name)
    with pytest.raises(UnknownName) as err:
        reg["mixtrl"]
    assert isinstance(err.value, UserError) and isinstance(err.value, KeyError)
    assert str(err.value) == ("unknown model family 'mixtrl' (did you mean 'mixtral'?); valid: mixtral, olmoe, "
                              "qwen3_moe; see docs/models.md")


def test_a_name_is_added_once_and_checked():
    seen = []
    reg = Registry("method", check=lambda name, entry: seen.append(name))
    reg.add("a", 1)
    with pytest.raises(ValueError, match="registered already"):
        reg.add("a", 2)
    with pytest.raises(ValueError, match="registered already"):
        reg.lazy("a", "json:loads")
    reg.lazy("b", "json:loads")
    assert seen == ["a"]
    reg["b"]
    assert seen == ["a", "b"]
    reg.remove("a")
    assert reg.names() == ("b",)


def test_a_room_raises_its_own_subclass_on_a_miss():
    class UnknownCodec(UnknownName):
        pass
    reg = Registry("codec", error=UnknownCodec)
    reg.add("json", 1)
    with pytest.raises(UnknownCodec, match=r"unknown codec 'jsn' \(did you mean 'json'\?\); valid: json"):
        reg["jsn"]
    assert isinstance(reg.unknown("x"), UserError)

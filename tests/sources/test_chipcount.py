"""The expected-chip-count check (npumon/sources/chipcount.py): NPUs found in a sysfs tree by vendor and device
id, the count learned and kept across a restart, and the configured count."""

import json

import pytest

from npumon.model import ChipSample, HostSample
from npumon.sources.base import Parts
from npumon.sources.chipcount import STATE_FILE, ChipCountSource, judge, npu_pci_devices


def sysfs(root, devices):
    """devices: address -> (vendor, device) as sysfs prints them."""
    for address, (vendor, device) in devices.items():
        directory = root / "sys/bus/pci/devices" / address
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "vendor").write_text(vendor + "\n")
        (directory / "device").write_text(device + "\n")


def npus(count):
    return {"0000:{:02x}:00.0".format(0xc1 + n): ("0x19e5", "0xd802") for n in range(count)}


def chips(count):
    return [ChipSample(npu=n, chip=0, bus_id="0000:{:02X}:00.0".format(0xc1 + n)) for n in range(count)]


def found(source, listed, now=1000.0):
    source.poll("chip-count", listed)
    parts = source.contribute(Parts(time=now, host=HostSample(), chips=tuple(listed)), now)
    return parts.host.extra["chip_count"]


def source(tmp_path, configured=None, state=True):
    return ChipCountSource(configured, str(tmp_path / "root"), str(tmp_path / "state") if state else None,
                           15.0, lambda: 1000.0, 120.0)


def test_only_huawei_npus_count_and_a_missing_sysfs_is_none(tmp_path):
    assert npu_pci_devices(str(tmp_path / "nothing")) == []
    sysfs(tmp_path / "root", dict(npus(2), **{"0000:00:02.0": ("0x8086", "0xd802"),  # not Huawei
                                            "0000:3d:00.0": ("0x19e5", "0x1822")}))  # a Huawei NIC
    (tmp_path / "root/sys/bus/pci/devices/0000:3e:00.0").mkdir()  # no vendor file at all
    assert npu_pci_devices(str(tmp_path / "root")) == ["0000:c1:00.0", "0000:c2:00.0"]


def test_a_card_gone_from_table_and_bus_after_a_restart_is_still_missing(tmp_path):
    sysfs(tmp_path / "root", npus(8))
    first = found(source(tmp_path), chips(8))
    assert first["missing"] == 0 and first["expected"] == 8
    assert json.loads((tmp_path / "state" / STATE_FILE).read_text()) == {"chips": 8, "pci": 8}
    # the card drops off the bus and out of the table; then the daemon restarts
    import shutil
    shutil.rmtree(str(tmp_path / "root/sys/bus/pci/devices/0000:c8:00.0"))
    after = found(source(tmp_path), chips(7))
    assert after["missing"] == 1
    assert after["problem"] == "npu-smi lists 7 of 8 chips; 1 of 8 NPUs are gone from the PCI bus"


def test_a_card_on_the_bus_but_not_in_the_table_is_missing_on_the_first_run(tmp_path):
    sysfs(tmp_path / "root", npus(8))
    first = found(source(tmp_path, state=False), chips(7))
    assert first["missing"] == 1 and first["unlisted"] == ["0000:c8:00.0"] and first["expected"] == 8


def test_the_configured_count_wins_and_a_table_not_read_says_nothing(tmp_path):
    assert found(source(tmp_path, configured=16), chips(8))["missing"] == 8
    assert judge(8, None, 0, [], None)["missing"] == 0  # npu-smi down: source-down tells, not this


def test_an_unreadable_state_file_is_learned_afresh(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / STATE_FILE).write_text("{broken")
    assert found(source(tmp_path), chips(8))["expected"] == 8


@pytest.mark.parametrize("text,problem", [("-1", "must be 0 (learn it) or more")])
def test_a_bad_expected_chips_is_one_line_naming_the_key(tmp_path, text, problem):
    from npumon.config.errors import ConfigError
    from npumon.settings import parse_config

    with pytest.raises(ConfigError) as raised:
        parse_config("faults: {{expected_chips: {}}}\n".format(text), "npumon.yaml")
    assert "faults.expected_chips" in str(raised.value) and problem in str(raised.value)


def test_each_bus_entry_is_read_once_until_it_goes_or_comes_back(tmp_path, monkeypatch):
    import shutil

    from npumon.sources import chipcount
    sysfs(tmp_path / "root", dict(npus(2), **{"0000:3d:00.0": ("0x19e5", "0x1822")}))  # 2 NPUs and a Huawei NIC
    (tmp_path / "root/sys/bus/pci/devices/0000:3e:00.0").mkdir()  # its vendor file not readable yet
    reads = []
    real = chipcount._hex_file
    monkeypatch.setattr(chipcount, "_hex_file", lambda path: reads.append(path) or real(path))
    known = {}
    root = str(tmp_path / "root")
    assert npu_pci_devices(root, known) == ["0000:c1:00.0", "0000:c2:00.0"]
    assert len(reads) == 7  # vendor and device of the three Huawei devices, the vendor of the fourth
    reads.clear()
    assert npu_pci_devices(root, known) == ["0000:c1:00.0", "0000:c2:00.0"]
    assert reads == [str(tmp_path / "root/sys/bus/pci/devices/0000:3e:00.0/vendor")]  # only the unknown one
    # one NPU leaves the bus; another device comes at its address: a new entry, read afresh
    shutil.rmtree(str(tmp_path / "root/sys/bus/pci/devices/0000:c2:00.0"))
    assert npu_pci_devices(root, known) == ["0000:c1:00.0"]
    assert len(known) == 2  # the gone entry forgotten (the unreadable one was never kept)
    sysfs(tmp_path / "root", {"0000:c2:00.0": ("0x8086", "0x1234")})
    assert npu_pci_devices(root, known) == ["0000:c1:00.0"]
    sysfs(tmp_path / "root", {"0000:3e:00.0": ("0x19e5", "0xd803")})  # the late one reads now: an A3 NPU
    assert npu_pci_devices(root, known) == ["0000:3e:00.0", "0000:c1:00.0"]

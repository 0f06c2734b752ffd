"""The simulated libdcmi.so answers what the simulated npu-smi prints at the same moment, for every product
and scenario, through every function it implements (in DCMI's units, per the real header)."""

import os
from ctypes import byref, c_int, c_uint

import pytest
from fake_dcmi_binding import (DCMI_DEVICE_TYPE_DDR, DCMI_DEVICE_TYPE_HBM, DCMI_ERR_CODE_INVALID_DEVICE_ID,
                               DCMI_ERR_CODE_NOT_SUPPORT, DCMI_OK, MCU_TYPE, NDIE, NPU_TYPE, VDIE, BoardInfo,
                               ChipInfo, ChipInfoV2, Dcmi, DieId, EccInfo, HbmInfo, MemoryInfoV3, MultiUtilization,
                               PcieInfoAll, text)

from npumon.sim import list_scenarios, prepare_simulation
from npumon.sim.dcmi import DCMI_PRODUCTS, DCMI_CLOCK_ENV
from npumon.sim.knobs import read_knobs
from npumon.sim.npusmi import respond, sim_host
from npumon.sim.products import FAMILY_310B, FAMILY_310P, FAMILY_910_93, get_product
from npumon.sim.scenario import load_scenario
from npumon.sim.state import STATE_ENV, read_state, scenario_time
from scenario_matrix import each_scenario_once

HEALTH = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3, "UNKNOWN": 0xFFFFFFFF}
COMPATIBILITY = {"OK": 1, "NOK": 2, "UNKNOWN": 3}  # enum dcmi_device_compat
# the scenarios whose values npu-smi answers at all; hang and unsupported are tested in test_fake_dcmi_faults.
# card-drop takes a card out of npu-smi's table only: the simulated libdcmi.so does not model a dropped card.
ANSWERING = [name for name in list_scenarios() if load_scenario(name)["behaviour"] in ("normal", "garbage")
             and name != "card-drop"]

pytestmark = pytest.mark.integration  # builds and loads a C library with the system compiler


@pytest.fixture(scope="module")
def dcmi(fake_dcmi_library):
    return Dcmi(fake_dcmi_library)


def simulate(tmp_path, monkeypatch, scenario, product, at):
    """A simulation `at` seconds into its scenario; the library answers as at that moment, and so does the
    returned npu-smi host (its own text, never garbled or refused: the values are what is compared)."""
    state_dir = str(tmp_path / "sim")
    prepare_simulation(state_dir, scenario=scenario, product=product, time_scale=1.0)
    state = read_state(state_dir)
    now = state["start_time"] + at
    monkeypatch.setenv(STATE_ENV, state_dir)
    monkeypatch.setenv(DCMI_CLOCK_ENV, repr(now))
    product_spec = get_product(product)
    host = sim_host(state, scenario_time(state, now), read_knobs(state_dir) if product_spec.knobs else None)
    host.refuse_queries = False
    return host


def smi(host, *args):
    """`npu-smi info -t ...` as key -> value (first occurrence of each key)."""
    text_out, _ = respond(["info", *args], host)
    values = {}
    for line in text_out.splitlines():
        if " : " in line or line.rstrip().endswith(":"):
            key, _, value = line.partition(":")
            values.setdefault(key.strip(), value.strip())
    return values


def ok(result):
    code, value = result
    assert code == DCMI_OK, code
    return value


# The V1 products whose npu-smi prints every board field this check compares. The 910A (whose npu-smi prints NA
# for its board's names) and the 950 (V2 calls: tests/sources/dcmi/test_dcmi_read_calls.py) are held to npu-smi
# through npumon's parity test (tests/sources/dcmi/test_dcmi_parity.py), which covers every product.
CHECKED_HERE = ("atlas-800i-a2", "atlas-a3", "atlas-300i-duo", "atlas-200i-a2")
assert set(CHECKED_HERE) <= set(DCMI_PRODUCTS)


# The default run checks every scenario on one of these products in turn, and healthy on each; the slow suite
# checks every scenario on every one.
@pytest.mark.parametrize("at", [0.0, 900.0])
@pytest.mark.parametrize("scenario, product", each_scenario_once(ANSWERING, CHECKED_HERE, CHECKED_HERE))
def test_every_function_answers_what_npu_smi_prints(dcmi, tmp_path, monkeypatch, scenario, product, at):
    host = simulate(tmp_path, monkeypatch, scenario, product, at)
    spec = host.product
    assert dcmi.call("dcmi_init") == DCMI_OK
    assert ok(dcmi.card_list()) == list(spec.cards) == ok(dcmi.card_list("dcmi_get_card_num_list"))
    for npu in spec.cards:
        assert ok(dcmi.device_num(npu)) == int(smi(host, "-t", "board", "-i", str(npu))["Chip Count"])
        mcu = -1 if spec.mcu_chip is None else spec.mcu_chip
        assert ok(dcmi.id_in_card(npu)) == (mcu if mcu >= 0 else spec.chips_per_card - 1, mcu, -1)
        check_card(dcmi, host, npu)
    for slot, values in host.chips:
        check_ids(dcmi, host, slot)
        check_identity(dcmi, host, slot)
        check_health(dcmi, host, slot, values)
        check_sensors(dcmi, host, slot)
        check_usage(dcmi, host, slot, values)
        check_ecc(dcmi, host, slot)


def check_card(dcmi, host, npu):
    spec = host.product
    board = smi(host, "-t", "board", "-i", str(npu))
    label = ok(dcmi.elabel(npu))
    assert label.serial_number.decode() == board["Serial Number"]
    assert label.product_name.decode() == board["Product Name"]
    assert label.manufacturer.decode() == board["Manufacturer"]
    assert ok(dcmi.version()) == board["Software Version"] == ok(dcmi.version("dcmi_get_driver_version"))
    if spec.mcu_chip is None:
        return
    mcu_common = smi(host, "-t", "common", "-i", str(npu), "-c", str(spec.mcu_chip))
    assert ok(dcmi.chip("dcmi_get_device_type", npu, spec.mcu_chip, c_int)) == MCU_TYPE
    assert ok(dcmi.chip("dcmi_get_device_temperature", npu, spec.mcu_chip, c_int)) == \
        int(mcu_common["Temperature(C)"])
    assert ok(dcmi.chip("dcmi_get_device_health", npu, spec.mcu_chip, c_uint)) == 0
    card_power = mcu_common.get("NPU Real-time Power(W)") or mcu_common.get("Power Dissipation(W)")
    code, tenths = dcmi.mcu_power(npu)
    if card_power is None:  # A2/A3 boards: the MCU's card power is not a DCMI call there
        assert code == DCMI_ERR_CODE_NOT_SUPPORT
    else:
        assert (code, "%.1f" % (tenths / 10)) == (DCMI_OK, card_power)
    assert dcmi.chip("dcmi_get_device_power_info", npu, spec.mcu_chip, c_int)[0] == \
        DCMI_ERR_CODE_INVALID_DEVICE_ID


def chip_call(dcmi, name, slot, ctype, *middle):
    return dcmi.chip(name, slot.npu, slot.chip, ctype, *middle)


def check_ids(dcmi, host, slot):
    mapping = [line.split() for line in respond(["info", "-m"], host)[0].splitlines()[1:]]
    row = next(row for row in mapping if row[:2] == [str(slot.npu), str(slot.chip)])
    assert ok(dcmi.logic_id(slot.npu, slot.chip)) == int(row[2])
    phy = int(row[3]) if host.product.family == FAMILY_910_93 else slot.phy_id  # `-m` prints Phy-ID on A3 only
    assert ok(dcmi.phy_from_logic(slot.device_id)) == phy
    assert ok(dcmi.logic_from_phy(phy)) == slot.device_id
    assert ok(dcmi.card_device_from_logic(slot.device_id)) == (slot.npu, slot.chip)
    assert ok(chip_call(dcmi, "dcmi_get_device_type", slot, c_int)) == NPU_TYPE


def check_identity(dcmi, host, slot):
    board = smi(host, "-t", "board", "-i", str(slot.npu), "-c", str(slot.chip))
    card = smi(host, "-t", "board", "-i", str(slot.npu))
    info = ok(chip_call(dcmi, "dcmi_get_device_chip_info", slot, ChipInfo))
    info2 = ok(chip_call(dcmi, "dcmi_get_device_chip_info_v2", slot, ChipInfoV2))
    assert text(info.chip_name) == text(info2.chip_name) == board["Chip Name"]
    assert text(info.chip_ver) == board["Chip Version"]
    assert text(info.chip_type) == board.get("Chip Type", "")  # A3's npu-smi prints none
    assert text(info2.npu_name) == board.get("NPU Name", "")
    common = smi(host, "-t", "common", "-i", str(slot.npu), "-c", str(slot.chip))
    assert info.aicore_cnt == int(common.get("Aicore Count", 0))
    board_info = ok(chip_call(dcmi, "dcmi_get_device_board_info", slot, BoardInfo))
    assert "0x%02x" % board_info.board_id == board["Board ID"]
    assert str(board_info.bom_id) == card["BOM ID"]
    assert chr(ord("A") + board_info.pcb_id - 1) == card["PCB ID"]
    die = " ".join("%08X" % word for word in ok(chip_call(dcmi, "dcmi_get_device_die_v2", slot, DieId, VDIE)).soc_die)
    assert die == board.get("VDie ID") or board["Die ID"].endswith(die)  # 310B: "V1, <words>"
    code, ndie = chip_call(dcmi, "dcmi_get_device_die_v2", slot, DieId, NDIE)
    if "NDie ID" in board:
        assert (code, " ".join("%08X" % word for word in ndie.soc_die)) == (DCMI_OK, board["NDie ID"])
    else:
        assert code == DCMI_ERR_CODE_NOT_SUPPORT
    code, pcie = chip_call(dcmi, "dcmi_get_device_pcie_info_v2", slot, PcieInfoAll)
    if slot.bus_id is None:
        assert code == DCMI_ERR_CODE_NOT_SUPPORT
    else:
        assert code == DCMI_OK
        bus = "%04X:%02X:%02X.%X" % (pcie.domain, pcie.bdf_busid, pcie.bdf_deviceid, pcie.bdf_funcid)
        assert bus == board["PCIe Bus Info"]
        assert ["0x%04X" % value for value in (pcie.venderid, pcie.deviceid, pcie.subvenderid, pcie.subdeviceid)] == \
            [card["PCI Vendor ID"], card["PCI Device ID"], card["Subsystem Vendor ID"], card["Subsystem Device ID"]]
    code, compatibility = chip_call(dcmi, "dcmi_get_device_compatibility", slot, c_int)
    if card.get("Compatibility", "NOT SUPPORT") == "NOT SUPPORT":  # SoC boards print no Compatibility line
        assert code == DCMI_ERR_CODE_NOT_SUPPORT
    else:
        assert (code, compatibility) == (DCMI_OK, COMPATIBILITY[card["Compatibility"]])
    code, main_board = chip_call(dcmi, "dcmi_get_mainboard_id", slot, c_uint)
    if "Main Board ID" in card:
        assert (code, "0x%02x" % main_board) == (DCMI_OK, card["Main Board ID"])
    else:
        assert code == DCMI_ERR_CODE_NOT_SUPPORT


def check_health(dcmi, host, slot, values):
    card = respond(["info", "-t", "health", "-i", str(slot.npu)], host)[0].split("\n\n")
    block = next(part for part in card if "Chip ID                        : {}".format(slot.chip) in part)
    printed = block.split("Health")[1].split(":")[1].split("\n")[0].strip()
    assert ok(chip_call(dcmi, "dcmi_get_device_health", slot, c_uint)) == HEALTH[printed]
    detail = smi(host, "-t", "health", "-i", str(slot.npu), "-c", str(slot.chip))
    codes = ok(dcmi.errorcodes(slot.npu, slot.chip))
    printed_codes = [] if detail["Error Code"] == "NA" else [int(word, 16) for word in detail["Error Code"].split()]
    assert codes == printed_codes
    texts = [ok(dcmi.errorcode_string(slot.npu, slot.chip, code)) for code in codes]
    assert texts == [information for _, information in values.errors]
    if texts:
        assert texts[0] == detail["Error Information"]


def check_sensors(dcmi, host, slot):
    spec = host.product
    temp = smi(host, "-t", "temp", "-i", str(slot.npu), "-c", str(slot.chip))
    printed_temp = temp.get("NPU Temperature (C)") or temp["Temperature (C)"]
    assert ok(chip_call(dcmi, "dcmi_get_device_temperature", slot, c_int)) == int(printed_temp)
    power = smi(host, "-t", "power", "-i", str(slot.npu), "-c", str(slot.chip))
    code, tenths = chip_call(dcmi, "dcmi_get_device_power_info", slot, c_int)
    if "NPU Real-time Power(W)" in power:
        assert (code, "%.1f" % (tenths / 10)) == (DCMI_OK, power["NPU Real-time Power(W)"])
    else:  # 310P chips, A3 die 1
        assert code == DCMI_ERR_CODE_NOT_SUPPORT
    volt = smi(host, "-t", "volt", "-i", str(slot.npu), "-c", str(slot.chip))
    assert "%.2f" % (ok(chip_call(dcmi, "dcmi_get_device_voltage", slot, c_uint)) / 100) == volt["Voltage(V)"]
    common = smi(host, "-t", "common", "-i", str(slot.npu), "-c", str(slot.chip))
    memory = smi(host, "-t", "memory", "-i", str(slot.npu), "-c", str(slot.chip))
    expected = {7: common.get("Aicore curFreq(MHZ)"), 9: common.get("Aicore Freq(MHZ)"),
                6: memory.get("HBM Clock Speed(MHz)"),
                1: memory.get("DDR Clock Speed(MHz)") if not spec.has_hbm else None}
    if spec.family == FAMILY_310B:
        expected[1] = memory["Clock Speed(MHz)"]
    for kind, printed in expected.items():
        code, mhz = chip_call(dcmi, "dcmi_get_device_frequency", slot, c_uint, kind)
        assert (code, mhz if code == DCMI_OK else None) == ((DCMI_OK, int(printed)) if printed is not None
                                                            else (DCMI_ERR_CODE_NOT_SUPPORT, None)), kind


def check_usage(dcmi, host, slot, values):
    spec = host.product
    usages = smi(host, "-t", "usages", "-i", str(slot.npu), "-c", str(slot.chip))
    if spec.has_hbm:
        expected = {2: "Aicore Usage Rate(%)", 3: "Aicpu Usage Rate(%)", 4: "Ctrlcpu Usage Rate(%)",
                    6: "HBM Usage Rate(%)", 10: "HBM Bandwidth Usage Rate(%)", 12: "Aivector Usage Rate(%)",
                    13: "NPU Utilization(%)"}
        hbm = ok(chip_call(dcmi, "dcmi_get_device_hbm_info", slot, HbmInfo))
        memory = smi(host, "-t", "memory", "-i", str(slot.npu), "-c", str(slot.chip))
        assert hbm.memory_size == int(usages["HBM Capacity(MB)"]) == slot.memory_total_mb
        assert hbm.memory_usage == values.memory_used_mb  # the main table's HBM-Usage(MB) used part
        assert hbm.memory_usage * 100 // hbm.memory_size == int(usages["HBM Usage Rate(%)"])
        assert hbm.freq == int(memory["HBM Clock Speed(MHz)"])
        assert hbm.temp == int(memory["HBM Temperature(C)"])
        assert hbm.bandwith_util_rate == int(usages["HBM Bandwidth Usage Rate(%)"])
        multi = ok(chip_call(dcmi, "dcmi_get_device_multi_utilization_rate", slot, MultiUtilization))
        period = MultiUtilization()  # (card, device, struct *, period): the struct before the period
        code = dcmi.call("dcmi_get_device_multi_utilization_rate_period", slot.npu, slot.chip, byref(period), 1)
        assert code == DCMI_OK
        printed = tuple(int(usages[key]) for key in (
            "Aicube Usage Rate(%)", "Aivector Usage Rate(%)", "Aicore Usage Rate(%)", "NPU Utilization(%)"))
        for each in (multi, period):
            assert (each.aic_util, each.aiv_util, each.aicore_util, each.npu_util) == printed
        assert chip_call(dcmi, "dcmi_get_device_memory_info_v3", slot, MemoryInfoV3)[0] == DCMI_ERR_CODE_NOT_SUPPORT
    else:
        prefix = "DDR " if spec.family == FAMILY_310P else ""  # 310P keys say DDR, 310B keys say Memory
        rate_key = prefix + "Usage Rate(%)" if prefix else "Memory Usage Rate(%)"
        bandwidth_key = "DDR Bandwidth Usage Rate(%)" if prefix else "Memory Bandwidth Usage Rate(%)"
        expected = {1: rate_key, 2: "Aicore Usage Rate(%)", 3: "Aicpu Usage Rate(%)", 4: "Ctrlcpu Usage Rate(%)",
                    5: bandwidth_key}
        if spec.family == FAMILY_310P:
            expected[12] = "Vectorcore Usage Rate(%)"
        memory = ok(chip_call(dcmi, "dcmi_get_device_memory_info_v3", slot, MemoryInfoV3))
        capacity_key = "DDR Capacity(MB)" if spec.family == FAMILY_310P else "Memory Capacity(MB)"
        assert memory.memory_size == int(usages[capacity_key])
        assert memory.memory_size - memory.memory_available == values.memory_used_mb
        assert memory.utiliza == int(usages[rate_key])
        assert memory.hugepages_total == int(usages[prefix + "Hugepages Total(page)"])
        used_pages = memory.hugepages_total - memory.hugepages_free
        assert (used_pages * 100 // memory.hugepages_total if memory.hugepages_total else 0) == \
            int(usages[prefix + "Hugepages Usage Rate(%)"])
        assert chip_call(dcmi, "dcmi_get_device_hbm_info", slot, HbmInfo)[0] == DCMI_ERR_CODE_NOT_SUPPORT
        assert chip_call(dcmi, "dcmi_get_device_multi_utilization_rate", slot, MultiUtilization)[0] == \
            DCMI_ERR_CODE_NOT_SUPPORT
    for kind in (1, 2, 3, 4, 5, 6, 10, 12, 13, 14):
        code, rate = chip_call(dcmi, "dcmi_get_device_utilization_rate", slot, c_uint, kind)
        if kind in expected:
            assert (code, rate) == (DCMI_OK, int(usages[expected[kind]])), kind
        else:
            assert code == DCMI_ERR_CODE_NOT_SUPPORT, kind
    processes = ok(dcmi.resource_info(slot.npu, slot.chip))
    assert processes == [(pid, megabytes * 1048576) for pid, _, megabytes in values.processes]


def check_ecc(dcmi, host, slot):
    spec = host.product
    ecc = smi(host, "-t", "ecc", "-i", str(slot.npu), "-c", str(slot.chip))
    memory_type = DCMI_DEVICE_TYPE_HBM if spec.has_hbm else DCMI_DEVICE_TYPE_DDR
    info = ok(chip_call(dcmi, "dcmi_get_device_ecc_info", slot, EccInfo, memory_type))
    other = DCMI_DEVICE_TYPE_DDR if spec.has_hbm else DCMI_DEVICE_TYPE_HBM
    assert chip_call(dcmi, "dcmi_get_device_ecc_info", slot, EccInfo, other)[0] == DCMI_ERR_CODE_NOT_SUPPORT
    if spec.family == FAMILY_310B:
        assert (info.single_bit_error_cnt, info.double_bit_error_cnt) == (
            int(ecc["Single-bit Error Count"]), int(ecc["Double-bit Error Count"]))
        return
    memory = "HBM" if spec.has_hbm else "DDR"
    assert [info.single_bit_error_cnt, info.double_bit_error_cnt, info.total_single_bit_error_cnt,
            info.total_double_bit_error_cnt, info.single_bit_isolated_pages_cnt,
            info.double_bit_isolated_pages_cnt] == [int(ecc[memory + suffix]) for suffix in (
                " Single Bit Error Count", " Double Bit Error Count", " Single Bit Aggregate Total Err Cnt",
                " Double Bit Aggregate Total Err Cnt", " Single Bit Isolated Pages Count",
                " Double Bit Isolated Pages Count")]
    assert info.enable_flag == 1


def test_values_follow_scenario_time_and_the_fan(dcmi, tmp_path, monkeypatch):
    """One library, one simulation: a ramp moves between calls as the clock moves, and an `npu-smi set` of
    the fan (which moves the chips' temperatures) reaches DCMI through the rewritten state file."""
    host = simulate(tmp_path, monkeypatch, "overheat", "atlas-800i-a2", 0.0)
    state = read_state(os.environ[STATE_ENV])
    readings = []
    for at in (0.0, 600.0):
        monkeypatch.setenv(DCMI_CLOCK_ENV, repr(state["start_time"] + at))
        readings.append(ok(dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)))
    assert readings[1] > readings[0]
    assert host.product.name == "atlas-800i-a2"

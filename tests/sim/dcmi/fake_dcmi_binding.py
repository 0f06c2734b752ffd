"""A minimal ctypes binding of the simulated libdcmi.so for its tests, written against the real header
(npumon/sim/dcmi/dcmi_interface_api.h = shared/reference/dcmi/dcmi_interface_api.h.txt, and
dcmi_driver_extras.h). Not npumon's binding: the tests check the library against the header with it.

`Dcmi(path).call(name, *args)` returns the code; the getters return (code, value)."""

import ctypes
from ctypes import Structure, byref, c_char, c_int, c_uint, c_ubyte, c_ulong, c_ulonglong

DCMI_OK = 0
DCMI_ERR_CODE_INVALID_PARAMETER = -8001
DCMI_ERR_CODE_TIME_OUT = -8006
DCMI_ERR_CODE_INVALID_DEVICE_ID = -8007
DCMI_ERR_CODE_DEVICE_NOT_EXIST = -8008
DCMI_ERR_CODE_NOT_REDAY = -8012
DCMI_ERR_CODE_NOT_SUPPORT = -8255
MAX_CHIP_NAME_LEN = 32
MAX_LENGTH = 256
NDIE, VDIE = 0, 1
DCMI_DEVICE_TYPE_DDR, DCMI_DEVICE_TYPE_HBM = 0, 2
NPU_TYPE, MCU_TYPE = 0, 1


class ChipInfo(Structure):
    _fields_ = [("chip_type", c_ubyte * MAX_CHIP_NAME_LEN), ("chip_name", c_ubyte * MAX_CHIP_NAME_LEN),
                ("chip_ver", c_ubyte * MAX_CHIP_NAME_LEN), ("aicore_cnt", c_uint)]


class ChipInfoV2(Structure):
    _fields_ = ChipInfo._fields_ + [("npu_name", c_ubyte * MAX_CHIP_NAME_LEN)]


class PcieInfoAll(Structure):
    _fields_ = [("venderid", c_uint), ("subvenderid", c_uint), ("deviceid", c_uint), ("subdeviceid", c_uint),
                ("domain", c_int), ("bdf_busid", c_uint), ("bdf_deviceid", c_uint), ("bdf_funcid", c_uint),
                ("reserve", c_ubyte * 32)]


class DieId(Structure):
    _fields_ = [("soc_die", c_uint * 5)]


class EccInfo(Structure):
    _fields_ = [("enable_flag", c_int)] + [(name, c_uint) for name in (
        "single_bit_error_cnt", "double_bit_error_cnt", "total_single_bit_error_cnt", "total_double_bit_error_cnt",
        "single_bit_isolated_pages_cnt", "double_bit_isolated_pages_cnt", "single_bit_next_isolated_pages_cnt",
        "double_bit_next_isolated_pages_cnt")]


class HbmInfo(Structure):
    _fields_ = [("memory_size", c_ulonglong), ("freq", c_uint), ("memory_usage", c_ulonglong), ("temp", c_int),
                ("bandwith_util_rate", c_uint)]


class MemoryInfoV3(Structure):
    _fields_ = [("memory_size", c_ulonglong), ("memory_available", c_ulonglong), ("freq", c_uint),
                ("hugepagesize", c_ulong), ("hugepages_total", c_ulong), ("hugepages_free", c_ulong),
                ("utiliza", c_uint), ("reserve", c_ubyte * 60)]


class BoardInfo(Structure):
    _fields_ = [("board_id", c_uint), ("pcb_id", c_uint), ("bom_id", c_uint), ("slot_id", c_uint)]


class MultiUtilization(Structure):
    _fields_ = [("aic_util", c_uint), ("aiv_util", c_uint), ("aicore_util", c_uint), ("npu_util", c_uint),
                ("reserved", c_uint * 8)]


class ProcMemInfo(Structure):
    _fields_ = [("proc_id", c_int), ("proc_mem_usage", c_ulong)]


class ElabelInfo(Structure):
    _fields_ = [(name, c_char * MAX_LENGTH) for name in (
        "product_name", "model", "manufacturer", "manufacturer_date", "serial_number")]


def text(array) -> str:
    return bytes(array).split(b"\0", 1)[0].decode()


class Dcmi:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)

    def call(self, name: str, *args) -> int:
        return getattr(self.lib, name)(*args)

    def _out(self, name, ctype, *args):
        value = ctype()
        return self.call(name, *args, byref(value)), value.value

    def card_list(self, name="dcmi_get_card_list"):
        count, cards = c_int(), (c_int * 64)()
        code = self.call(name, byref(count), cards, 64)
        return code, list(cards[:count.value])

    def device_num(self, card):
        return self._out("dcmi_get_device_num_in_card", c_int, card)

    def id_in_card(self, card):
        device_max, mcu, cpu = c_int(), c_int(), c_int()
        code = self.call("dcmi_get_device_id_in_card", card, byref(device_max), byref(mcu), byref(cpu))
        return code, (device_max.value, mcu.value, cpu.value)

    def logic_id(self, card, device):
        logic = c_int()
        return self.call("dcmi_get_device_logic_id", byref(logic), card, device), logic.value

    def phy_from_logic(self, logic):
        phy = c_uint()
        return self.call("dcmi_get_device_phyid_from_logicid", c_uint(logic), byref(phy)), phy.value

    def logic_from_phy(self, phy):
        logic = c_uint()
        return self.call("dcmi_get_device_logicid_from_phyid", c_uint(phy), byref(logic)), logic.value

    def card_device_from_logic(self, logic):
        card, device = c_int(), c_int()
        code = self.call("dcmi_get_card_id_device_id_from_logicid", byref(card), byref(device), c_uint(logic))
        return code, (card.value, device.value)

    def chip(self, name, card, device, ctype, *middle):
        value = ctype()
        code = self.call(name, card, device, *middle, byref(value))
        return code, (value.value if isinstance(value, ctypes._SimpleCData) else value)

    def errorcodes(self, card, device):
        count, codes = c_int(), (c_uint * 128)()
        code = self.call("dcmi_get_device_errorcode_v2", card, device, byref(count), codes, c_uint(128))
        return code, list(codes[:count.value])

    def errorcode_string(self, card, device, error_code):
        buffer = (c_ubyte * 256)()
        code = self.call("dcmi_get_device_errorcode_string", card, device, c_uint(error_code), buffer, 256)
        return code, text(buffer)

    def resource_info(self, card, device):
        processes, count = (ProcMemInfo * 32)(), c_int()
        code = self.call("dcmi_get_device_resource_info", card, device, processes, byref(count))
        return code, [(processes[i].proc_id, processes[i].proc_mem_usage) for i in range(count.value)]

    def mcu_power(self, card):
        power = c_int()
        return self.call("dcmi_mcu_get_power_info", card, byref(power)), power.value

    def elabel(self, card):
        value = ElabelInfo()
        return self.call("dcmi_get_card_elabel_v2", card, byref(value)), value

    def version(self, name="dcmi_get_dcmi_version"):
        buffer = ctypes.create_string_buffer(64)
        return self.call(name, buffer, 64), buffer.value.decode()

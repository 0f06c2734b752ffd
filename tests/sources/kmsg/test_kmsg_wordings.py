"""Each driver wording of a fault gets its class, the device the line names, and the code looked up in the
catalogue; harmless lines (initialisation, module release, process exit, other vendors' NPU drivers) are no
fault.

Lines: the TS exception line is the one the CANN troubleshooting docs quote (a device kernel log exported by
msnpureport); the others are built from hicann/driver's format strings (devdrv_manager, dms, drv_pcie
devdrv_dma.c, msg_chan, hb_read.c, heart_beat_judge) behind dmc_log.h's "[ascend] [ERROR] [<module>]
[<function> <line>] " prefix, with invented numbers; the heartbeat lines are FAULTS.md §2.2's.
"""

import pytest

from npumon.faults.patterns import PatternError, load_patterns, match_line

TS_DOC_LINE = ("[ERROR] KERNEL(5044,sklogd):2024-07-29-10:33:24.874.211 [klogd.c:247][257384.473533] [ascend] "
               "[ERROR] [tsdrv] [tsdrv_hb_cq_callback 332] <kworker/0:0:20353> receive ts exception msg, call "
               "excep_code=0xb4060006, time=1722249204.850014098s, devid=0 tsid=0")
PREFIX = "[ascend] [ERROR] [{}] [{} {}] <{}> "

# (line, class, device, code, level, kind)
FAULTS = [
    (TS_DOC_LINE, "ts_exception", 0, "B4060006", "RestartBusiness", "transient"),
    (PREFIX.format("tsdrv", "tsdrv_hb_cq_callback", 332, "kworker/0:0:20353")
     + "receive ts exception msg, call excep_code=0xb4060007, time=1722249204.850014098s, devid=5 tsid=0",
     "ts_exception", 5, "B4060007", "RestartBusiness", "transient"),
    (PREFIX.format("devdrv", "devdrv_manager_ts_status", 2210, "kworker/1:1:88")
     + "receive ts exception message from device(4).", "ts_exception", 4, None, None, "device"),
    (PREFIX.format("devdrv", "devdrv_manager_ioctl_get_devinfo", 1190, "python3:4411:4411")
     + "device(4) is not initialized", "device_not_initialized", 4, None, None, "device"),
    (PREFIX.format("dms_module", "hal_kernel_get_device_chip_die_id", 48, "npu-smi:51:51")
     + "Device is not initialized. (dev_id=6)", "device_not_initialized", 6, None, None, "device"),
    (PREFIX.format("devdrv", "vdevdrv_get_info", 731, "npu-smi:52:52")
     + "The device is not initialized. (devid=3)", "device_not_initialized", 3, None, None, "device"),
    (PREFIX.format("devdrv", "devdrv_get_phy_id", 312, "npu-smi:53:53")
     + "Device manager is not initialized. (dev_id=2; device_manager_info=0)",
     "device_not_initialized", 2, None, None, "device"),
    (PREFIX.format("drv_pcie", "devdrv_pcie_sriov_enable", 355, "bash:9:9")
     + "Device is abnormal, can not enable sriov. (dev_id=7)", "device_abnormal", 7, None, None, "device"),
    ("[ascend] [drv_pcie] [devdrv_dma_copy_sml 1041] <python3:5150:5150> "
     "Device is abnormal, can't dma copy to device. (dev_id=5)", "device_abnormal", 5, None, None, "device"),
    (PREFIX.format("drv_pcie", "devdrv_dma_wait_done", 702, "python3:5150:5150")
     + "Dma copy failed. (dev_id=2; chan_id=3; valid=1; status=4)", "dma_fault", 2, None, None, "transient"),
    (PREFIX.format("msg_chan", "agentdrv_msg_send", 380, "kworker/2:0:61")
     + "DMA copy failed. (dev_id=1; msg_type=2; common_type=0; in_data_len=64; ret=-110)",
     "dma_fault", 1, None, None, "transient"),
    (PREFIX.format("drv_pcie", "devdrv_dma_sync_copy", 839, "python3:5150:5150")
     + "Wait timeout. (dev_id=6; chan_id=5)", "dma_fault", 6, None, None, "transient"),
    (PREFIX.format("devdrv", "devdrv_manager_get_info", 1533, "npu-smi:54:54") + "device(3) is not ready.",
     "device_not_ready", 3, None, None, "device"),
    (PREFIX.format("drv_soft_fault", "hb_read_one_device_count", 203, "kworker/3:1:1234,1234")
     + "Heartbeat lost! (device_id=2; old_count=880; current_count=880; lost_count=1; total_lost_count=1; "
       "miss_read_count=0; hb_read_fail_count=0).", "heartbeat_lost", 2, "40F84E00", "RestartNPU", "device"),
    ("Aug  1 08:38:31 localhost kernel: [ 1197.584409] [ascend] [ERROR] [drv_soft_fault] [heart_beat_judge 318] "
     "<kworker/5:1H:39365> Heartbeat lost! (device=1; old_count=1104; new_count=1104; lost_count=4; "
     "total_lost_count=4; total_10s_count=0; total_15s_count 0).", "heartbeat_lost", 1, "40F84E00", "RestartNPU",
     "device"),
    ("[ascend] [drv_soft_fault] [ERROR] [heart_beat_judge 318] <kworker/5:1H:39365> Heartbeat lost! (device=7; "
     "old_count=1; new_count=1; lost_count=4; total_lost_count=4)", "heartbeat_lost", 7, "40F84E00", "RestartNPU",
     "device"),
]

HARMLESS = [
    "[2025-04-16-03:08:13.704312] [ascend] [drv_pcie] [INFO] [devdrv_init_dev_num 2248] <systemd-udevd:4853:4853> "
    "Findout device. (index=7; device=d105; dev_num=0)",
    PREFIX.format("drv_pcie", "devdrv_probe", 1400, "systemd-udevd:4853:4853") + "Findout device. (index=3; "
    "device=d802; dev_num=2)",
    PREFIX.format("devdrv", "devdrv_manager_exit", 3100, "rmmod:811:811") + "module exit. (dev_num=8)",
    PREFIX.format("devmm", "devmm_svm_release", 512, "python3:2290156:2290156") + "Process exit. (devid=3; "
    "hostpid=2290156)",
    "rknpu fdab0000.npu: RKNPU: rknpu iommu is enabled, using iommu mode",
    "amdxdna 0000:c4:00.1: [drm] *ERROR* aie2_mgmt_fw_init: npu firmware init failed, ret -110",
    "intel_vpu 0000:00:0b.0: [drm] *ERROR* ivpu_ipc_irq_handler(): IPC event_id=0x12345678 not expected",
]


@pytest.mark.parametrize("line, fault_class, device, code, level, kind", FAULTS,
                         ids=["{}-{}".format(row[1], n) for n, row in enumerate(FAULTS)])
def test_each_wording_gives_class_device_code_and_level(line, fault_class, device, code, level, kind):
    fault = match_line(line, load_patterns())
    assert (fault.fault_class, fault.device, fault.code, fault.level, fault.kind) == (
        fault_class, device, code, level, kind)


@pytest.mark.parametrize("line", HARMLESS, ids=range(len(HARMLESS)))
def test_harmless_lines_are_no_fault(line):
    assert match_line(line, load_patterns()) is None


def test_an_unknown_ascend_error_line_is_still_a_generic_driver_error_with_its_device():
    fault = match_line(PREFIX.format("hdcdrv", "hdcdrv_recv", 77, "a:1:1") + "Session closed. (devid=5)",
                       load_patterns())
    assert (fault.fault_class, fault.device) == ("driver_error", 5)


def test_a_users_file_replaces_every_builtin_pattern_of_a_class_and_may_ignore_lines(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("patterns:\n"
                    "  - {class: ts_exception, match: 'ts went away', kind: transient}\n"
                    "  - {class: quiet, match: 'Session closed', ignore: true}\n")
    patterns = load_patterns([str(mine)])
    assert [p.fault_class for p in patterns].count("ts_exception") == 1
    assert match_line(TS_DOC_LINE, patterns).fault_class == "driver_error"  # the built-in wordings are gone
    assert match_line(PREFIX.format("hdcdrv", "x", 1, "a:1:1") + "Session closed. (devid=5)", patterns) is None


@pytest.mark.parametrize("entry, problem", [
    ("{class: q, match: x, ignore: true, kind: device}", "an ignore pattern takes only class, match and ascend"),
    ("{class: q, match: x, ignore: maybe}", "ignore must be true or false"),
])
def test_bad_ignore_patterns_are_one_line_errors(tmp_path, entry, problem):
    bad = tmp_path / "bad.yaml"
    bad.write_text("patterns:\n  - " + entry + "\n")
    with pytest.raises(PatternError, match=problem):
        load_patterns([str(bad)])

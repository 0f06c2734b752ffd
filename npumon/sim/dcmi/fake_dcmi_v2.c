/* npumon's simulated libdcmi.so, part 5: the V2 API (dcmiv2_*, dcmi_interface_api_v2.h), which the Ascend 950's
   driver answers in place of V1 (its dcmi_init and V1 getters return -8255; a V1 product's dcmiv2_* do). One
   logical device id per chip instead of (card, device). Each function runs its V1 twin's body under its own name
   (fake_v2_enter), so values, faults (hang, segfault, codes named dcmiv2_*) and support are the same code. On the
   950 every card is one chip whose card id is its logical id, which the card-level calls use. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "dcmi_interface_api.h"
#include "dcmi_interface_api_v2.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

#define V2(name, v1_call)        \
    do {                         \
        fake_v2_enter(name);     \
        return (v1_call);        \
    } while (0)

int dcmiv2_init(void)
{
    int code = fake_begin("dcmiv2_init", 1);
    if (code == DCMI_OK) {
        code = (int)fake_get_long("fault.init", DCMI_OK);
    }
    fake_end();
    return code;
}

int dcmiv2_get_device_list(int *device_list, int *device_num, int list_len)
{
    BEGIN("dcmiv2_get_device_list");
    NEED(device_list);
    NEED(device_num);
    int code = fake_injected_or_unsupported(function_);
    if (code != DCMI_OK) {
        RETURN(code);
    }
    int count = fake_chip_count();
    if (list_len < count) {
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    for (int logic = 0; logic < count; logic++) {
        device_list[logic] = logic;
    }
    *device_num = count;
    RETURN(DCMI_OK);
}

int dcmiv2_get_device_type(int dev_id, enum dcmi_unit_type *device_type)
{
    V2("dcmiv2_get_device_type", dcmi_get_device_type(FAKE_V2_CARD, dev_id, device_type));
}

int dcmiv2_get_device_pcie_info(int dev_id, struct dcmi_pcie_info_all *pcie_info)
{
    V2("dcmiv2_get_device_pcie_info", dcmi_get_device_pcie_info_v2(FAKE_V2_CARD, dev_id, pcie_info));
}

int dcmiv2_get_device_chip_info(int dev_id, struct dcmi_chip_info_v2 *chip_info)
{
    V2("dcmiv2_get_device_chip_info", dcmi_get_device_chip_info_v2(FAKE_V2_CARD, dev_id, chip_info));
}

int dcmiv2_get_device_power_info(int dev_id, int *power)
{
    V2("dcmiv2_get_device_power_info", dcmi_get_device_power_info(FAKE_V2_CARD, dev_id, power));
}

int dcmiv2_get_device_health(int dev_id, unsigned int *health)
{
    V2("dcmiv2_get_device_health", dcmi_get_device_health(FAKE_V2_CARD, dev_id, health));
}

int dcmiv2_get_device_error_code_list(int dev_id, int *error_count, unsigned int *error_code_list,
                                      unsigned int list_len)
{
    V2("dcmiv2_get_device_error_code_list",
       dcmi_get_device_errorcode_v2(FAKE_V2_CARD, dev_id, error_count, error_code_list, list_len));
}

int dcmiv2_get_device_temperature(int dev_id, int *temperature)
{
    V2("dcmiv2_get_device_temperature", dcmi_get_device_temperature(FAKE_V2_CARD, dev_id, temperature));
}

int dcmiv2_get_device_voltage(int dev_id, unsigned int *voltage)
{
    V2("dcmiv2_get_device_voltage", dcmi_get_device_voltage(FAKE_V2_CARD, dev_id, voltage));
}

int dcmiv2_get_device_ecc_info(int dev_id, enum dcmi_device_type input_type, struct dcmi_ecc_info *device_ecc_info)
{
    V2("dcmiv2_get_device_ecc_info", dcmi_get_device_ecc_info(FAKE_V2_CARD, dev_id, input_type, device_ecc_info));
}

int dcmiv2_get_device_frequency(int dev_id, enum dcmi_freq_type input_type, unsigned int *frequency)
{
    V2("dcmiv2_get_device_frequency", dcmi_get_device_frequency(FAKE_V2_CARD, dev_id, input_type, frequency));
}

int dcmiv2_get_device_hbm_info(int dev_id, struct dcmi_hbm_info *hbm_info)
{
    V2("dcmiv2_get_device_hbm_info", dcmi_get_device_hbm_info(FAKE_V2_CARD, dev_id, hbm_info));
}

int dcmiv2_get_device_utilization_rate(int dev_id, int input_type, unsigned int *utilization_rate)
{
    V2("dcmiv2_get_device_utilization_rate",
       dcmi_get_device_utilization_rate(FAKE_V2_CARD, dev_id, input_type, utilization_rate));
}

int dcmiv2_get_device_multi_utilization_rate(int dev_id, struct dcmi_multi_utilization_info *util_info)
{
    V2("dcmiv2_get_device_multi_utilization_rate",
       dcmi_get_device_multi_utilization_rate(FAKE_V2_CARD, dev_id, util_info));
}

int dcmiv2_get_device_multi_utilization_rate_period(int dev_id, struct dcmi_multi_utilization_info *util_info,
                                                    int period)
{
    V2("dcmiv2_get_device_multi_utilization_rate_period",
       dcmi_get_device_multi_utilization_rate_period(FAKE_V2_CARD, dev_id, util_info, period));
}

int dcmiv2_get_chip_phy_id_by_dev_id(unsigned int dev_id, unsigned int *phyid)
{
    V2("dcmiv2_get_chip_phy_id_by_dev_id", dcmi_get_device_phyid_from_logicid(dev_id, phyid));
}

int dcmiv2_get_dev_id_by_chip_phy_id(unsigned int phyid, unsigned int *dev_id)
{
    V2("dcmiv2_get_dev_id_by_chip_phy_id", dcmi_get_device_logicid_from_phyid(phyid, dev_id));
}

int dcmiv2_get_device_die_id(int dev_id, enum dcmi_die_type input_type, struct dcmi_die_id *die_id)
{
    V2("dcmiv2_get_device_die_id", dcmi_get_device_die_v2(FAKE_V2_CARD, dev_id, input_type, die_id));
}

int dcmiv2_get_device_proc_mem_info(int dev_id, struct dcmi_proc_mem_info *proc_info, int *proc_num)
{
    V2("dcmiv2_get_device_proc_mem_info", dcmi_get_device_resource_info(FAKE_V2_CARD, dev_id, proc_info, proc_num));
}

int dcmiv2_get_device_board_info(int dev_id, struct dcmi_board_info *board_info)
{
    V2("dcmiv2_get_device_board_info", dcmi_get_device_board_info(FAKE_V2_CARD, dev_id, board_info));
}

int dcmiv2_get_mainboard_id(int dev_id, unsigned int *mainboard_id)
{
    V2("dcmiv2_get_mainboard_id", dcmi_get_mainboard_id(FAKE_V2_CARD, dev_id, mainboard_id));
}

int dcmiv2_get_dcmi_version(char *dcmi_ver, int buf_size)
{
    V2("dcmiv2_get_dcmi_version", dcmi_get_dcmi_version(dcmi_ver, buf_size));
}

int dcmiv2_get_device_elabel_info(int dev_id, struct dcmi_elabel_info *elabel_info)
{
    V2("dcmiv2_get_device_elabel_info", dcmi_get_card_elabel_v2(dev_id, elabel_info));
}

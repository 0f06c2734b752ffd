/* npumon's simulated libdcmi.so, part 3: the monitoring getters (health, error codes, temperature, power,
   voltage, frequency, utilisation, memory, ECC, processes), real signatures from dcmi_interface_api.h and
   dcmi_driver_extras.h; each value is what the simulated npu-smi prints at the same moment, in DCMI's
   units (npumon/sim/dcmi/state.py says which npu-smi line each one matches). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "dcmi_interface_api.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

#define HEALTH_ABSENT 0xFFFFFFFFu

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health)
{
    BEGIN("dcmi_get_device_health");
    NEED(health);
    int mcu = fake_mcu_check(function_, card_id, device_id);
    if (mcu != -1) { /* the MCU stays healthy in every scenario */
        if (mcu == DCMI_OK) {
            *health = 0;
        }
        RETURN(mcu);
    }
    CHIP(card_id, device_id, -1);
    *health = chip.health;
    RETURN(DCMI_OK);
}

int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *error_code_list,
                                 unsigned int list_len)
{
    BEGIN("dcmi_get_device_errorcode_v2");
    NEED(error_count);
    NEED(error_code_list);
    CHIP(card_id, device_id, -1);
    int count = chip.error_count < (int)list_len ? chip.error_count : (int)list_len;
    memcpy(error_code_list, chip.errors, sizeof(unsigned int) * (size_t)count);
    *error_count = count;
    RETURN(DCMI_OK);
}

int dcmi_get_device_errorcode_string(int card_id, int device_id, unsigned int error_code, unsigned char *error_info,
                                     int buf_size)
{
    BEGIN("dcmi_get_device_errorcode_string");
    NEED(error_info);
    CHIP(card_id, device_id, -1);
    const char *information = fake_error_text(chip.logic, error_code);
    if (buf_size <= 0 || information == NULL) { /* the simulator knows only the texts of the chip's codes */
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    fake_copy_text(error_info, (size_t)buf_size, information);
    RETURN(DCMI_OK);
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature)
{
    BEGIN("dcmi_get_device_temperature");
    NEED(temperature);
    int mcu = fake_mcu_check(function_, card_id, device_id);
    if (mcu != -1) { /* the MCU reads the board sensors, taken from the card's chip 0 */
        struct fake_chip first;
        if (mcu == DCMI_OK && (mcu = fake_chip_at(card_id, 0, &first)) == DCMI_OK) {
            *temperature = first.board_temperature;
        }
        RETURN(mcu);
    }
    CHIP(card_id, device_id, -1);
    *temperature = chip.temperature;
    RETURN(DCMI_OK);
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power)
{
    BEGIN("dcmi_get_device_power_info");
    NEED(power);
    if (fake_mcu_id() >= 0 && device_id == fake_mcu_id()) { /* not allowed on the MCU id */
        RETURN(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    }
    CHIP(card_id, device_id, -1);
    *power = chip.power_tenths;
    RETURN(DCMI_OK);
}

int dcmi_mcu_get_power_info(int card_id, int *power)
{
    BEGIN("dcmi_mcu_get_power_info");
    NEED(power);
    if (fake_card_index(card_id) < 0) {
        RETURN(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    }
    int code = fake_injected_or_unsupported(function_);
    if (code != DCMI_OK) {
        RETURN(code);
    }
    double watts = 0.0; /* the whole card, as the card's MCU measures it: the sum of its chips */
    for (int device = 0; device < fake_chips_per_card(); device++) {
        struct fake_chip chip;
        if (fake_chip_at(card_id, device, &chip) == DCMI_OK) {
            watts += chip.power_watts;
        }
    }
    *power = fake_tenths(watts);
    RETURN(DCMI_OK);
}

int dcmi_get_device_voltage(int card_id, int device_id, unsigned int *voltage)
{
    BEGIN("dcmi_get_device_voltage");
    NEED(voltage);
    CHIP(card_id, device_id, -1);
    *voltage = (unsigned int)fake_get_long("voltage_centivolts", 0);
    RETURN(DCMI_OK);
}

int dcmi_get_device_frequency(int card_id, int device_id, enum dcmi_freq_type input_type, unsigned int *frequency)
{
    BEGIN("dcmi_get_device_frequency");
    NEED(frequency);
    CHIP(card_id, device_id, (int)input_type);
    switch (input_type) {
    case DCMI_FREQ_DDR:
    case DCMI_FREQ_HBM:
        *frequency = (unsigned int)fake_get_long("memory_clock_mhz", 0);
        break;
    case DCMI_FREQ_AICORE_CURRENT_:
        *frequency = (unsigned int)chip.aicore_freq;
        break;
    case DCMI_FREQ_AICORE_MAX:
        *frequency = (unsigned int)fake_get_long("aicore_rated_mhz", 0);
        break;
    default: /* control CPU and vector core clocks: the simulator has no value for them */
        RETURN(DCMI_ERR_CODE_NOT_SUPPORT);
    }
    RETURN(DCMI_OK);
}

static int utilization(const struct fake_chip *chip, int input_type, unsigned int *rate)
{
    int memory_rate = (int)(chip->memory_used_mb * 100 / chip->memory_total_mb); /* npu-smi's usage rate */
    switch (input_type) {
    case DCMI_UTILIZATION_RATE_DDR:
    case DCMI_UTILIZATION_RATE_HBM:
        *rate = (unsigned int)memory_rate;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_AICORE:
        *rate = (unsigned int)chip->aicore;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_AICPU:
        *rate = (unsigned int)chip->aicpu;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_CTRLCPU:
        *rate = (unsigned int)chip->ctrlcpu;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_DDR_BANDWIDTH:
        *rate = (unsigned int)chip->ddr_bandwidth;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_HBM_BANDWIDTH:
        *rate = (unsigned int)chip->hbm_bandwidth;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_VECTORCORE: /* the 910 family's AI Vector, the 310P's vector cores */
        *rate = (unsigned int)(fake_get_long("vector_is_aivector", 0) ? chip->aivector : chip->vectorcore);
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_NPU:
        *rate = (unsigned int)chip->npu_util;
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_AICUBE:
        *rate = (unsigned int)chip->aicube;
        return DCMI_OK;
    default:
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate)
{
    BEGIN("dcmi_get_device_utilization_rate");
    NEED(utilization_rate);
    CHIP(card_id, device_id, input_type);
    RETURN(utilization(&chip, input_type, utilization_rate));
}

static int multi_utilization(const char *function, int card_id, int device_id,
                             struct dcmi_multi_utilization_info *util_info)
{
    BEGIN(function);
    NEED(util_info);
    CHIP(card_id, device_id, -1);
    memset(util_info, 0, sizeof(*util_info));
    util_info->aic_util = (unsigned int)chip.aicube;
    util_info->aiv_util = (unsigned int)chip.aivector;
    util_info->aicore_util = (unsigned int)chip.aicore;
    util_info->npu_util = (unsigned int)chip.npu_util;
    RETURN(DCMI_OK);
}

int dcmi_get_device_multi_utilization_rate(int card_id, int device_id, struct dcmi_multi_utilization_info *util_info)
{
    return multi_utilization("dcmi_get_device_multi_utilization_rate", card_id, device_id, util_info);
}

int dcmi_get_device_multi_utilization_rate_period(int card_id, int device_id,
                                                  struct dcmi_multi_utilization_info *util_info, int period)
{
    (void)period; /* the simulator's values are already averages */
    return multi_utilization("dcmi_get_device_multi_utilization_rate_period", card_id, device_id, util_info);
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info)
{
    BEGIN("dcmi_get_device_hbm_info");
    NEED(hbm_info);
    CHIP(card_id, device_id, -1);
    memset(hbm_info, 0, sizeof(*hbm_info));
    hbm_info->memory_size = (unsigned long long)chip.memory_total_mb;
    hbm_info->freq = (unsigned int)fake_get_long("memory_clock_mhz", 0);
    hbm_info->memory_usage = (unsigned long long)chip.memory_used_mb;
    hbm_info->temp = chip.hbm_temperature;
    hbm_info->bandwith_util_rate = (unsigned int)chip.hbm_bandwidth;
    RETURN(DCMI_OK);
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info)
{
    BEGIN("dcmi_get_device_memory_info_v3");
    NEED(memory_info);
    CHIP(card_id, device_id, -1);
    memset(memory_info, 0, sizeof(*memory_info));
    long total_mb = chip.ddr_total_mb > 0 ? chip.ddr_total_mb : chip.memory_total_mb; /* DDR: the 910A's own */
    long used_mb = chip.ddr_total_mb > 0 ? chip.ddr_used_mb : chip.memory_used_mb;
    memory_info->memory_size = (unsigned long long)total_mb;
    memory_info->memory_available = (unsigned long long)(total_mb - used_mb);
    memory_info->freq = (unsigned int)fake_get_long("memory_clock_mhz", 0);
    memory_info->hugepagesize = (unsigned long)fake_get_long("hugepage_size_kb", 2048);
    memory_info->hugepages_total = (unsigned long)chip.hugepages_total;
    memory_info->hugepages_free = (unsigned long)(chip.hugepages_total - chip.hugepages_used);
    memory_info->utiliza = (unsigned int)(used_mb * 100 / total_mb);
    RETURN(DCMI_OK);
}

int dcmi_get_device_ecc_info(int card_id, int device_id, enum dcmi_device_type input_type,
                             struct dcmi_ecc_info *device_ecc_info)
{
    BEGIN("dcmi_get_device_ecc_info");
    NEED(device_ecc_info);
    CHIP(card_id, device_id, (int)input_type);
    if ((long)input_type != fake_get_long("ecc_memory_type", -1)) { /* HBM on the 910 family, DDR on the 310 */
        RETURN(DCMI_ERR_CODE_NOT_SUPPORT);
    }
    memset(device_ecc_info, 0, sizeof(*device_ecc_info));
    device_ecc_info->enable_flag = 1;
    device_ecc_info->single_bit_error_cnt = chip.ecc_single;
    device_ecc_info->double_bit_error_cnt = chip.ecc_double;
    /* the simulator keeps no counter resets: the aggregate totals equal the current counts */
    device_ecc_info->total_single_bit_error_cnt = chip.ecc_single;
    device_ecc_info->total_double_bit_error_cnt = chip.ecc_double;
    device_ecc_info->single_bit_isolated_pages_cnt = chip.ecc_single_pages;
    device_ecc_info->double_bit_isolated_pages_cnt = chip.ecc_double_pages;
    RETURN(DCMI_OK);
}

int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info, int *proc_num)
{
    BEGIN("dcmi_get_device_resource_info");
    NEED(proc_info);
    NEED(proc_num);
    CHIP(card_id, device_id, -1);
    for (int index = 0; index < chip.process_count; index++) { /* the caller passes room for 32 */
        proc_info[index].proc_id = chip.process_pid[index];
        proc_info[index].proc_mem_usage = (unsigned long)chip.process_mb[index] * 1048576ul;
    }
    *proc_num = chip.process_count;
    RETURN(DCMI_OK);
}

/* npumon's simulated libdcmi.so, part 4: one chip's values at the moment of the call, from the scenario's
   expressions in the state file, evaluated and rounded exactly as npumon/sim/values.py and the simulated
   npu-smi do, so DCMI and npu-smi agree to the digit. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcmi_interface_api.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

#define UINT32_MAX_VALUE 4294967295.0
#define MAX_STEPS 4096

/* One value expression at scenario time t, as values.evaluate: "c V" constant, "s N t0 v0 t1 v1 ..." steps,
   "r start per_minute wobble period phase min max" a ramp (min/max "nan" when absent). */
static double evaluate(const char *expression, double t)
{
    if (expression == NULL) {
        return 0.0;
    }
    char *cursor;
    if (expression[0] == 'c') {
        return strtod(expression + 1, NULL);
    }
    if (expression[0] == 's') {
        long count = strtol(expression + 1, &cursor, 10);
        count = count < 0 ? 0 : (count > MAX_STEPS ? MAX_STEPS : count);
        double value = 0.0;
        for (long index = 0; index < count; index++) {
            double at = strtod(cursor, &cursor), step = strtod(cursor, &cursor);
            if (index == 0 || t >= at) {
                value = step;
            }
        }
        return value;
    }
    cursor = (char *)expression + 1;
    double start = strtod(cursor, &cursor), per_minute = strtod(cursor, &cursor);
    double wobble = strtod(cursor, &cursor), period = strtod(cursor, &cursor), phase = strtod(cursor, &cursor);
    double high = strtod(cursor, &cursor), low = strtod(cursor, &cursor);
    double value = start + per_minute * t / 60.0;
    if (wobble != 0.0) {
        value += wobble * sin(2.0 * M_PI * t / period + phase);
    }
    if (!isnan(high)) {
        value = fmin(value, high);
    }
    if (!isnan(low)) {
        value = fmax(value, low);
    }
    return value;
}

/* Python's round() (half to even) for the default rounding mode, and values.py's conversions. */
static long py_round(double value)
{
    return (long)nearbyint(value);
}

static double field(int logic, const char *name)
{
    return evaluate(fake_chip_get(logic, name), fake_call_time());
}

static int percent(int logic, const char *name)
{
    return (int)py_round(fmin(100.0, fmax(0.0, field(logic, name))));
}

static long count_value(int logic, const char *name)
{
    return py_round(fmax(0.0, field(logic, name)));
}

static unsigned int counter(int logic, const char *name)
{
    return (unsigned int)fmin(UINT32_MAX_VALUE, floor(fmax(0.0, field(logic, name))));
}

/* npu-smi prints watts with "%.1f"; formatting the same double the same way gives the same tenths. */
int fake_tenths(double watts)
{
    char printed[64];
    snprintf(printed, sizeof(printed), "%.1f", watts);
    char *point = strchr(printed, '.');
    long whole = strtol(printed, NULL, 10);
    return (int)(whole * 10 + (point != NULL ? point[1] - '0' : 0));
}

static double cooling_offset(void)
{
    const char *cooling = fake_get("cooling"); /* "from to since time_constant", products with a fan */
    if (cooling == NULL) {
        return 0.0;
    }
    char *cursor = (char *)cooling;
    double from = strtod(cursor, &cursor), to = strtod(cursor, &cursor);
    double since = strtod(cursor, &cursor), time_constant = strtod(cursor, &cursor);
    return to + (from - to) * exp(-fmax(0.0, fake_call_time() - since) / time_constant);
}

static void words_u32(const char *list, unsigned int *out, int max)
{
    char *cursor = (char *)list;
    for (int index = 0; index < max; index++) {
        out[index] = cursor == NULL ? 0 : (unsigned int)strtoul(cursor, &cursor, 16);
    }
}

int fake_chip_by_logic(int logic, struct fake_chip *chip)
{
    if (logic < 0 || logic >= fake_chip_count() || fake_chip_get(logic, "card") == NULL) {
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    }
    memset(chip, 0, sizeof(*chip));
    chip->logic = logic;
    chip->card = (int)fake_chip_long(logic, "card", -1);
    chip->device = (int)fake_chip_long(logic, "device", -1);
    chip->phy = (int)fake_chip_long(logic, "phy", logic);
    const char *bus = fake_chip_get(logic, "bus");
    chip->has_bus = bus != NULL && sscanf(bus, "%x:%x:%x.%x", &chip->domain, &chip->bus, &chip->dev,
                                          &chip->func) == 4;
    chip->memory_total_mb = fake_chip_long(logic, "memory_total_mb", 0);
    if (chip->memory_total_mb <= 0) { /* a damaged state file must not divide by zero */
        chip->memory_total_mb = 1;
    }
    words_u32(fake_chip_get(logic, "vdie"), chip->vdie, 5);
    words_u32(fake_chip_get(logic, "ndie"), chip->ndie, 5);
    chip->health = (unsigned int)(long long)field(logic, "health");
    chip->compatibility = (int)field(logic, "compatibility");
    chip->temperature = (int)py_round(py_round(field(logic, "temperature_celsius")) + cooling_offset());
    chip->hbm_temperature = (int)py_round(field(logic, "hbm_temperature_celsius"));
    chip->board_temperature = (int)py_round(field(logic, "board_temperature_celsius"));
    chip->power_watts = fmax(0.0, field(logic, "power_watts"));
    chip->power_tenths = fake_tenths(chip->power_watts);
    chip->aicore = percent(logic, "aicore_percent");
    chip->aivector = percent(logic, "aivector_percent");
    chip->aicube = percent(logic, "aicube_percent");
    chip->npu_util = percent(logic, "npu_utilization_percent");
    chip->aicpu = percent(logic, "aicpu_percent");
    chip->ctrlcpu = percent(logic, "ctrlcpu_percent");
    chip->vectorcore = percent(logic, "vectorcore_percent");
    chip->hbm_bandwidth = percent(logic, "hbm_bandwidth_percent");
    chip->ddr_bandwidth = percent(logic, "ddr_bandwidth_percent");
    double used_share = fmin(100.0, fmax(0.0, field(logic, "memory_used_percent"))) / 100.0;
    chip->memory_used_mb = py_round((double)chip->memory_total_mb * used_share);
    chip->ddr_total_mb = fake_chip_long(logic, "ddr_total_mb", 0); /* the 910A's own DDR, beside its HBM */
    double ddr_share = fmin(100.0, fmax(0.0, field(logic, "ddr_used_percent"))) / 100.0;
    chip->ddr_used_mb = py_round((double)chip->ddr_total_mb * ddr_share);
    chip->aicore_freq = count_value(logic, "aicore_freq_mhz");
    chip->hugepages_total = count_value(logic, "hugepages_total");
    chip->hugepages_used = count_value(logic, "hugepages_used");
    chip->ecc_single = counter(logic, "ecc_single_bit_errors");
    chip->ecc_double = counter(logic, "ecc_double_bit_errors");
    chip->ecc_single_pages = counter(logic, "ecc_single_bit_isolated_pages");
    chip->ecc_double_pages = counter(logic, "ecc_double_bit_isolated_pages");
    chip->hccs_health = (int)field(logic, "hccs_health");
    chip->hccs_traffic_gbps = fmax(0.0, field(logic, "hccs_traffic_gbps"));
    chip->hccs_degraded_link = count_value(logic, "hccs_degraded_link");
    chip->hccs_degraded_lanes = count_value(logic, "hccs_degraded_lanes");
    chip->hccs_crc_errors = counter(logic, "hccs_crc_errors");
    chip->hccs_retries = counter(logic, "hccs_retries");
    chip->sio_tx_crc_errors = counter(logic, "sio_tx_crc_errors");
    chip->sio_rx_crc_errors = counter(logic, "sio_rx_crc_errors");
    chip->ub_flits_per_second = fmax(0.0, field(logic, "ub_flits_per_second"));
    chip->ub_bandwidth_mbps = fmax(0.0, field(logic, "ub_bandwidth_mbps"));
    chip->ub_degraded_port = count_value(logic, "ub_degraded_port");
    chip->ub_degraded_status = (int)field(logic, "ub_degraded_port_status");
    chip->ub_crc_errors = counter(logic, "ub_crc_errors");
    chip->ub_retries = counter(logic, "ub_retries");
    char *cursor = (char *)fake_chip_get(logic, "errors");
    while (cursor != NULL && chip->error_count < FAKE_MAX_ERRORS) {
        char *end;
        unsigned long code = strtoul(cursor, &end, 16);
        if (end == cursor) {
            break;
        }
        chip->errors[chip->error_count++] = (unsigned int)code;
        cursor = end;
    }
    long processes = fake_chip_long(logic, "processes", 0);
    for (long index = 0; index < processes && index < FAKE_MAX_PROCESSES; index++) {
        char name[32];
        snprintf(name, sizeof(name), "process.%ld", index);
        const char *process = fake_chip_get(logic, name); /* "pid mb N" or "pid pct <expression>" */
        if (process == NULL) {
            break;
        }
        char *rest;
        chip->process_pid[index] = (int)strtol(process, &rest, 10);
        while (*rest == ' ') {
            rest++;
        }
        if (strncmp(rest, "mb ", 3) == 0) {
            chip->process_mb[index] = strtol(rest + 3, NULL, 10);
        } else if (strncmp(rest, "pct ", 4) != 0) {
            break;
        } else {
            double share = fmin(100.0, fmax(0.0, evaluate(rest + 4, fake_call_time())));
            chip->process_mb[index] = py_round((double)chip->memory_total_mb * share / 100.0);
        }
        chip->process_count++;
    }
    return DCMI_OK;
}

int fake_chip_at(int card_id, int device_id, struct fake_chip *chip)
{
    if (card_id == FAKE_V2_CARD) { /* a V2 call: device_id is the logical id */
        if (device_id < 0 || device_id >= fake_chip_count()) {
            return DCMI_ERR_CODE_INVALID_DEVICE_ID;
        }
        return fake_chip_by_logic(device_id, chip);
    }
    int index = fake_card_index(card_id);
    if (index < 0 || device_id < 0 || device_id >= fake_chips_per_card()) {
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    }
    return fake_chip_by_logic(index * fake_chips_per_card() + device_id, chip);
}

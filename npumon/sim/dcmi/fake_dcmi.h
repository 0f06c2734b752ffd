/* npumon's simulated libdcmi.so: what fake_dcmi.c (the DCMI functions) needs from fake_dcmi_state.c (the
   state file the Python simulator writes, its faults and its values at this moment). Not part of any
   real DCMI header. The state file's format is described in npumon/sim/dcmi/state.py. */
#ifndef NPUMON_FAKE_DCMI_H
#define NPUMON_FAKE_DCMI_H

#include <stddef.h>

/* the helpers stay inside the library: only the dcmi_* functions are exported */
#pragma GCC visibility push(hidden)

#define FAKE_MAX_CHIPS 64
#define FAKE_MAX_CARDS 64
#define FAKE_MAX_ERRORS 128
#define FAKE_MAX_PROCESSES 32

/* One NPU chip (die) of the simulated host, its values evaluated at the moment of the call. */
struct fake_chip {
    int logic, card, device, phy;
    int has_bus;
    unsigned int domain, bus, dev, func;
    long memory_total_mb;
    unsigned int vdie[5], ndie[5];
    unsigned int health;
    int compatibility; /* enum dcmi_device_compat; 0: not supported */
    int temperature, hbm_temperature, board_temperature;
    double power_watts;
    int power_tenths; /* power_watts as npu-smi prints it ("%.1f"), in 0.1 W */
    int aicore, aivector, aicube, npu_util, aicpu, ctrlcpu, vectorcore;
    int hbm_bandwidth, ddr_bandwidth;
    long memory_used_mb;
    long ddr_total_mb, ddr_used_mb; /* the 910A's DDR next to its HBM (0: the chip's memory is its only one) */
    long aicore_freq;
    long hugepages_total, hugepages_used;
    unsigned int ecc_single, ecc_double, ecc_single_pages, ecc_double_pages;
    int error_count;
    unsigned int errors[FAKE_MAX_ERRORS];
    /* the interconnect links (npumon/sim/links.py): HCCS health code (0 OK), traffic per link each way,
       the degraded link (0: none) and its lanes, its CRC / retry counters; the A3's SIO CRC counts */
    int hccs_health;
    double hccs_traffic_gbps;
    long hccs_degraded_link, hccs_degraded_lanes;
    unsigned int hccs_crc_errors, hccs_retries, sio_tx_crc_errors, sio_rx_crc_errors;
    /* the 950's UB ports (fake_dcmi_ub.c): flits per second each way on a full-width port, the degraded port
       (0: none), its state (DCMI_UB_PORT_STATUS_PARTIAL_LANE or _INITIAL) and its CRC / retry counters */
    double ub_flits_per_second, ub_bandwidth_mbps;
    long ub_degraded_port;
    int ub_degraded_status;
    unsigned int ub_crc_errors, ub_retries;
    int process_count;
    int process_pid[FAKE_MAX_PROCESSES];
    long process_mb[FAKE_MAX_PROCESSES];
};

/* Lock the state, reload it if the file changed, and act on the faults that concern `function`
   (segfault, hang) and the per-call latency. Every DCMI function starts with fake_begin and ends with
   fake_end. Returns 0, or a DCMI error code when there is no state to answer from. */
int fake_begin(const char *function, int is_init);
void fake_end(void);

/* After fake_begin: */
double fake_call_time(void);     /* scenario time of this call */
const char *fake_chip_get(int logic, const char *field); /* chip.<logic>.<field>, or NULL */
long fake_chip_long(int logic, const char *field, long fallback);
const char *fake_get(const char *key); /* a global key's value, or NULL */
long fake_get_long(const char *key, long fallback);
double fake_get_double(const char *key, double fallback);
int fake_card_count(void);
int fake_card_id(int index);
int fake_card_index(int card_id); /* -1 if no such card */
int fake_chips_per_card(void);
int fake_mcu_id(void);            /* -1 if the card has no MCU */
/* The chip at (card, device), filled at this moment; DCMI_OK, or -8007 for no such chip. */
int fake_chip_at(int card_id, int device_id, struct fake_chip *chip);
int fake_chip_by_logic(int logic, struct fake_chip *chip);
int fake_chip_count(void);
/* An injected return code for this function (and chip, logic >= 0), or 0. */
int fake_injected_code(const char *function, int logic);
/* Whether this function (with this input type, or -1; on this chip, or -1) is unsupported here. */
int fake_unsupported(const char *function, int input_type, int logic);
/* Watts as npu-smi prints them ("%.1f") in DCMI's 0.1 W units. */
int fake_tenths(double watts);
/* The error information text of `code` on chip `logic`, or NULL. */
const char *fake_error_text(int logic, unsigned int code);

/* Shared by the DCMI function files: */
int fake_npu_chip(const char *function, int card_id, int device_id, int input_type, struct fake_chip *chip);
int fake_mcu_check(const char *function, int card_id, int device_id);
void fake_copy_text(unsigned char *to, size_t size, const char *from);
int fake_injected_or_unsupported(const char *function);

/* The V2 API (dcmiv2_*, one logical device id; fake_dcmi_v2.c) runs the V1 function's body under its own name:
   fake_v2_enter(name) makes `name` the function of the next BEGIN on this thread, and card FAKE_V2_CARD with
   device = the logical id addresses that chip. A V2 product refuses V1 calls with -8255, a V1 product V2 ones. */
#define FAKE_V2_CARD (-1000000)
void fake_v2_enter(const char *name);
const char *fake_function_name(const char *name); /* the V2 name entered on this thread, else `name` */

/* Every DCMI function: BEGIN(its name) ... RETURN(code); CHIP(card, device, input type) declares `chip`. */
#define BEGIN(name)                          \
    const char *function_ = fake_function_name(name); \
    int begun_ = fake_begin(function_, 0);   \
    if (begun_ != DCMI_OK) {                 \
        fake_end();                          \
        return begun_;                       \
    }
#define RETURN(code)       \
    do {                   \
        int code_ = (code); \
        fake_end();        \
        return code_;      \
    } while (0)
#define NEED(pointer)                             \
    if ((pointer) == NULL) {                      \
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);  \
    }
/* The NPU chip at (card, device), with the function's injected code and support checked. */
#define CHIP(card, device, input_type)                                    \
    struct fake_chip chip;                                                \
    {                                                                     \
        int found_ = fake_npu_chip(function_, (card), (device), (input_type), &chip); \
        if (found_ != DCMI_OK) {                                          \
            RETURN(found_);                                               \
        }                                                                 \
    }

#pragma GCC visibility pop

#endif

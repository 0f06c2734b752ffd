/* npumon's simulated libdcmi.so, part 6: the interconnect links. dcmi_get_device_info for HCCS (status, lane
   info, statistics u32 / u64) and SIO (CRC errors), and dcmi_get_hccs_link_bandwidth_info; every value is what
   the simulated npu-smi prints at the same moment for -t hccs, -t hccs-bw and -t sio-info (npumon/sim/links.py:
   links 1-7, the degraded link narrower and holding the errors, packets growing with scenario time). The 310P
   (state hccs_statistics_only) answers the statistics alone, for its one index 0 carrying the chip's traffic,
   CRC errors and retries. */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>

#include "dcmi_interface_api.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

#define FIRST_LINK 1
#define LAST_LINK 7
#define FULL_LANES 4
#define PACKETS_PER_GBYTE 5e7 /* one packet (flit) is 20 bytes */
#define SIO_COUNTER_MAX 65535

static long lanes_of(const struct fake_chip *chip, int link)
{
    return link == chip->hccs_degraded_link ? chip->hccs_degraded_lanes : FULL_LANES;
}

static double gbps_of(const struct fake_chip *chip, int link)
{
    return chip->hccs_traffic_gbps * (double)lanes_of(chip, link) / FULL_LANES;
}

/* lane mode -> bits 9-10 of pcs_lane_bitmap: 00 -> 0, 01 -> 1, 10 -> 4, 11 -> 2 */
static unsigned int lane_mode_code(long lanes)
{
    return lanes == 1 ? 1u : lanes == 4 ? 2u : lanes == 2 ? 3u : 0u;
}

static int hccs_status(const struct fake_chip *chip, void *buf, unsigned int *size)
{
    struct dcmi_hccs_statues *status = buf;
    if (*size < sizeof(*status)) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    memset(status, 0, sizeof(*status));
    status->hdlc_status = DCMI_HDLC_STATUS_OK;
    if (chip->hccs_health != 0) { /* abnormal, bits 8-15 the first faulty PCS */
        long first = chip->hccs_degraded_link > 0 ? chip->hccs_degraded_link : FIRST_LINK;
        status->pcs_status = 1u | ((unsigned int)first & 0xFFu) << 8;
    }
    *size = sizeof(*status);
    return DCMI_OK;
}

static int hccs_lanes(const struct fake_chip *chip, void *buf, unsigned int *size)
{
    struct dcmi_hccs_lane_info *info = buf;
    if (*size < sizeof(*info)) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    memset(info, 0, sizeof(*info));
    for (int link = FIRST_LINK; link <= LAST_LINK; link++) { /* packed in the order of the bitmap's set bits */
        long lanes = lanes_of(chip, link);
        unsigned int lane_bits = 0;
        for (long lane = 0; lane < lanes && lane < FULL_LANES; lane++) {
            lane_bits |= 1u << (1 + lane);
        }
        info->hccs_port_pcs_bitmap |= 1u << link;
        info->pcs_lane_bitmap[link - FIRST_LINK] = 1u | lane_bits | lane_mode_code(lanes) << 9;
    }
    *size = sizeof(*info);
    return DCMI_OK;
}

static unsigned long long packets_of(const struct fake_chip *chip, int link)
{
    return (unsigned long long)floor(gbps_of(chip, link) * PACKETS_PER_GBYTE * fmax(0.0, fake_call_time()));
}

static int statistics_only(void)
{
    return fake_get_long("hccs_statistics_only", 0) != 0;
}

/* the 310P's one index: the chip's traffic at full width, its CRC errors and retries */
static int hccs_310p_statistics(const struct fake_chip *chip, unsigned int sub_cmd, void *buf, unsigned int *size)
{
    unsigned long long packets =
        (unsigned long long)floor(chip->hccs_traffic_gbps * PACKETS_PER_GBYTE * fmax(0.0, fake_call_time()));
    if (sub_cmd == DCMI_HCCS_STATISTIC_U64_SUB_CMD) {
        struct dcmi_hccs_statistic_info_u64 *info = buf;
        if (*size < sizeof(*info)) {
            return DCMI_ERR_CODE_INVALID_PARAMETER;
        }
        memset(info, 0, sizeof(*info));
        info->tx_cnt[0] = info->rx_cnt[0] = packets;
        info->crc_err_cnt[0] = chip->hccs_crc_errors;
        info->retry_cnt[0] = chip->hccs_retries;
        *size = sizeof(*info);
        return DCMI_OK;
    }
    return DCMI_ERR_CODE_NOT_SUPPORT; /* "310P only does sub 5" */
}

static int hccs_statistics(const struct fake_chip *chip, unsigned int sub_cmd, void *buf, unsigned int *size)
{
    if (sub_cmd == DCMI_HCCS_STATISTIC_U64_SUB_CMD) {
        struct dcmi_hccs_statistic_info_u64 *info = buf;
        if (*size < sizeof(*info)) {
            return DCMI_ERR_CODE_INVALID_PARAMETER;
        }
        memset(info, 0, sizeof(*info));
        for (int link = FIRST_LINK; link <= LAST_LINK; link++) {
            info->tx_cnt[link] = info->rx_cnt[link] = packets_of(chip, link);
            if (link == chip->hccs_degraded_link) {
                info->crc_err_cnt[link] = chip->hccs_crc_errors;
                info->retry_cnt[link] = chip->hccs_retries;
            }
        }
        *size = sizeof(*info);
        return DCMI_OK;
    }
    struct dcmi_hccs_statistic_info *info = buf; /* the u32 form wraps at 2^32 */
    if (*size < sizeof(*info)) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    memset(info, 0, sizeof(*info));
    for (int link = FIRST_LINK; link <= LAST_LINK; link++) {
        info->tx_cnt[link] = info->rx_cnt[link] = (unsigned int)packets_of(chip, link);
        if (link == chip->hccs_degraded_link) {
            info->crc_err_cnt[link] = chip->hccs_crc_errors;
            info->retry_cnt[link] = chip->hccs_retries;
        }
    }
    *size = sizeof(*info);
    return DCMI_OK;
}

static int sio_errors(const struct fake_chip *chip, void *buf, unsigned int *size)
{
    struct dcmi_sio_crc_err_statistic_info *info = buf;
    if (*size < sizeof(*info)) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    memset(info, 0, sizeof(*info));
    info->tx_error_count = (unsigned short)fmin(SIO_COUNTER_MAX, chip->sio_tx_crc_errors);
    info->rx_error_count = (unsigned short)fmin(SIO_COUNTER_MAX, chip->sio_rx_crc_errors);
    *size = sizeof(*info);
    return DCMI_OK;
}

int dcmi_get_device_info(int card_id, int device_id, enum dcmi_main_cmd main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size)
{
    BEGIN("dcmi_get_device_info");
    NEED(buf);
    NEED(size);
    if (main_cmd != DCMI_MAIN_CMD_HCCS && main_cmd != DCMI_MAIN_CMD_SIO) {
        RETURN(DCMI_ERR_CODE_NOT_SUPPORT); /* the simulator models only the link commands */
    }
    CHIP(card_id, device_id, (int)main_cmd);
    if (main_cmd == DCMI_MAIN_CMD_SIO) {
        RETURN(sub_cmd == DCMI_SIO_SUB_CMD_CRC_ERR_STATISTICS ? sio_errors(&chip, buf, size)
                                                              : DCMI_ERR_CODE_NOT_SUPPORT);
    }
    if (statistics_only()) {
        RETURN(hccs_310p_statistics(&chip, sub_cmd, buf, size));
    }
    switch (sub_cmd) {
    case DCMI_HCCS_STATUS_SUB_CMD:
        RETURN(hccs_status(&chip, buf, size));
    case DCMI_HCCS_LANE_INFO_SUB_CMD:
        RETURN(hccs_lanes(&chip, buf, size));
    case DCMI_HCCS_STATISTIC_SUB_CMD:
    case DCMI_HCCS_STATISTIC_U64_SUB_CMD:
        RETURN(hccs_statistics(&chip, sub_cmd, buf, size));
    default:
        RETURN(DCMI_ERR_CODE_NOT_SUPPORT);
    }
}

int dcmi_get_hccs_link_bandwidth_info(int card_id, int device_id, struct dcmi_hccs_bandwidth_info *info)
{
    BEGIN("dcmi_get_hccs_link_bandwidth_info");
    NEED(info);
    CHIP(card_id, device_id, -1);
    if (info->profiling_time < 1 || info->profiling_time > 1000) {
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    int profiling_time = info->profiling_time;
    memset(info, 0, sizeof(*info));
    info->profiling_time = profiling_time;
    for (int link = FIRST_LINK; link <= LAST_LINK; link++) {
        info->tx_bandwidth[link] = info->rx_bandwidth[link] = gbps_of(&chip, link);
        info->total_txbw += info->tx_bandwidth[link];
    }
    info->total_rxbw = info->total_txbw;
    RETURN(DCMI_OK);
}

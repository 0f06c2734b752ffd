/* npumon's simulated libdcmi.so, part 7: the Ascend 950's UB ports, which only the V2 API answers (a V1
   product refuses every dcmiv2_* call in fake_begin). The Atlas 350 has ports 4, 5 and 6 on UDie 0 (the 950
   hccn_tool doc's -dev_info table; shared/reference/interconnect-and-compute.md 1.4: "only first 9 ports real").
   Every port is linked at full width and carries the chip's ub_flits_per_second each way, except port
   ub_degraded_port (0: none): PARTIAL_LANE (half the flits) or INITIAL (not linked, no flits), holding the CRC
   errors and retransmission requests. Flit counters grow with scenario time from 0 at time 0. The bandwidth
   call answers ub_bandwidth_mbps each way on a full-width port, half on a partial one, 0 on an unlinked one. */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>

#include "dcmi_interface_api.h"
#include "dcmi_interface_api_v2.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

static const int ub_ports[] = {4, 5, 6};
#define UB_PORT_COUNT ((int)(sizeof(ub_ports) / sizeof(ub_ports[0])))
#define UB_UDIE 0

static int port_state(const struct fake_chip *chip, int port)
{
    return port == chip->ub_degraded_port ? chip->ub_degraded_status : DCMI_UB_PORT_STATUS_FULL_LANE;
}

static int is_ub_port(int port)
{
    for (int index = 0; index < UB_PORT_COUNT; index++) {
        if (ub_ports[index] == port) {
            return 1;
        }
    }
    return 0;
}

int dcmiv2_get_ub_port_link_status(int dev_id, struct dcmi_ub_port_link_status *ub_status)
{
    BEGIN("dcmiv2_get_ub_port_link_status");
    NEED(ub_status);
    CHIP(FAKE_V2_CARD, dev_id, -1);
    memset(ub_status, 0, sizeof(*ub_status));
    ub_status->ub_link_status = DCMI_UB_ALL_PORT_LINK;
    for (int index = 0; index < UB_PORT_COUNT; index++) {
        int state = port_state(&chip, ub_ports[index]);
        ub_status->ub_port_status[ub_ports[index]] = (dcmi_ub_port_status)state;
        if (state == DCMI_UB_PORT_STATUS_INITIAL) {
            ub_status->ub_link_status = DCMI_UB_PARTIAL_PORT_LINK;
        }
    }
    RETURN(DCMI_OK);
}

static double lane_share(int state)
{
    return state == DCMI_UB_PORT_STATUS_FULL_LANE ? 1.0 : state == DCMI_UB_PORT_STATUS_PARTIAL_LANE ? 0.5 : 0.0;
}

int dcmiv2_get_ub_realtime_bandwidth_info(int dev_id, unsigned int profiling_time,
                                          struct dcmi_ub_port_info *ub_port_info,
                                          struct dcmi_ub_bandwidth_info *ub_bandwidth_info)
{
    BEGIN("dcmiv2_get_ub_realtime_bandwidth_info");
    NEED(ub_port_info);
    NEED(ub_bandwidth_info);
    CHIP(FAKE_V2_CARD, dev_id, -1);
    if (profiling_time < 1 || profiling_time > 226 || ub_port_info->udie_id != UB_UDIE
        || !is_ub_port(ub_port_info->port_id)) {
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    memset(ub_bandwidth_info, 0, sizeof(*ub_bandwidth_info));
    double mbps = chip.ub_bandwidth_mbps * lane_share(port_state(&chip, ub_port_info->port_id));
    ub_bandwidth_info->tx_bandwidth = ub_bandwidth_info->rx_bandwidth = (unsigned int)floor(mbps);
    RETURN(DCMI_OK);
}

int dcmiv2_get_port_pkt_stats_info(int dev_id, struct dcmi_ub_port_info *ub_port_info,
                                   struct dcmi_port_pkt_stats_info *port_pkt_stats_info)
{
    BEGIN("dcmiv2_get_port_pkt_stats_info");
    NEED(ub_port_info);
    NEED(port_pkt_stats_info);
    CHIP(FAKE_V2_CARD, dev_id, -1);
    if (ub_port_info->udie_id != UB_UDIE || !is_ub_port(ub_port_info->port_id)) {
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    int port = ub_port_info->port_id;
    int state = port_state(&chip, port);
    double share = lane_share(state);
    unsigned long long flits =
        (unsigned long long)floor(chip.ub_flits_per_second * share * fmax(0.0, fake_call_time()));
    memset(port_pkt_stats_info, 0, sizeof(*port_pkt_stats_info));
    port_pkt_stats_info->rx_busi_flit_num = port_pkt_stats_info->tx_busi_flit_num = flits;
    if (port == chip.ub_degraded_port) {
        port_pkt_stats_info->crc_error_sum = chip.ub_crc_errors;
        port_pkt_stats_info->retry_req_sum = chip.ub_retries;
    }
    RETURN(DCMI_OK);
}

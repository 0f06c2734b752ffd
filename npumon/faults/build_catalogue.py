"""Regenerate catalogue.csv from the reference table (a maintainer's tool, not used at run time):

    python -m npumon.faults.build_catalogue fault_codes.csv > npumon/faults/catalogue.csv

The input is the fault table of MindCluster's faultCode.json with FaultDiag's meanings (the reference's
fault_codes.csv). A code listed under two levels keeps the higher one, as the Ascend Device Plugin does.
"""

import csv
import sys
from typing import Dict, List, TextIO

from .levels import level_rank

SOURCE = ("# source: MindCluster component/ascend-device-plugin/build/faultCode.json @ 22bb3d98 (levels), "
          "FaultDiag kg-config.json (module, meaning), faultCustomization.json (escalation)")
COLUMNS = ("code", "level", "also_listed_in", "module", "meaning", "escalation")


def build(reference: TextIO, out: TextIO) -> int:
    rows: Dict[str, Dict[str, str]] = {}
    for entry in csv.DictReader(reference):
        code = entry["code"].strip().upper()
        row = {"code": code, "level": entry["level"], "also_listed_in": entry["also_listed_in"],
               "module": entry["module"], "meaning": entry["cause_en"],
               "escalation": entry["escalation_faultCustomization"]}
        known = rows.get(code)
        if known is None:
            rows[code] = row
            continue
        levels: List[str] = sorted({known["level"], row["level"]}, key=level_rank)
        known["level"] = levels[-1]
        known["also_listed_in"] = ";".join(levels[:-1])
        for key in ("module", "meaning", "escalation"):
            known[key] = known[key] or row[key]
    out.write(SOURCE + "\n")
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows.values():
        writer.writerow(row)
    return len(rows)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8", newline="") as handle:
        sys.stderr.write("{} codes\n".format(build(handle, sys.stdout)))

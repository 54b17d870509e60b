"""gpu_fault: the engine's GPU reported a fatal-class Xid or uncorrectable (double-bit) ECC errors."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence

# Xid codes after which the GPU (or the process on it) cannot be trusted until a reset, per NVIDIA's
# Xid catalogue: 48 DBE, 63/64 page retirement / row remapping, 74 NVLink, 79 fallen off the bus,
# 92 high single-bit ECC rate, 94 contained / 95 uncontained ECC error.
FATAL_XIDS: frozenset[int] = frozenset({48, 63, 64, 74, 79, 92, 94, 95})


class GpuFault(Playbook):
    id = "gpu_fault"
    title = "GPU fault (Xid / ECC)"
    severity = "critical"
    signals = ("xid_errors", "xid_last_code", "ecc_dbe_errors")
    alerts = ("VllmGpuXidError", "VllmGpuEccDoubleBit")
    defaults: ClassVar[dict[str, float]] = {"xid_errors": 0.0, "ecc_dbe_errors": 0.0}
    runbook = """\
**What it means.** The driver reported an Xid error on one of the engine's GPUs during the window, or
the GPU's volatile double-bit (uncorrectable) ECC count is above zero. Xids 48, 63, 64, 74, 79, 92, 94
and 95 are fatal-class: the memory, the NVLink or the whole GPU cannot be trusted until a reset, and
requests on it fail or return garbage (critical). Other Xids (13, 31, 43: usually an application
fault) are reported as a warning and escalated for a person to judge.

**Confirm by hand.** `dmesg -T | grep -i xid` or `journalctl -k | grep NVRM`; `nvidia-smi -q -d ECC`
(Volatile Double Bit counts) and `nvidia-smi -q -d ROW_REMAPPER`; with dcgm-exporter,
`DCGM_FI_DEV_XID_ERRORS` (the last Xid) and `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`. A dcgm last-Xid gauge
that was already set at the doctor's first read may be old: compare the kernel log's timestamps.

**Remedies.** Stop routing new requests to the engine at the router (in-flight ones finish), then
escalate: a GPU reset (`nvidia-smi -r`), a node reboot (Xid 79) or an RMA is a person's decision.
Relaunching on the same GPU does not help until it has been reset.
"""

    def check(self, view: EngineView) -> Condition | None:
        code_value = view.value("xid_last_code")
        code = int(code_value) if code_value is not None else 0  # 0: no Xid seen (or not visible)
        fatal = code in FATAL_XIDS
        new_xids = view.above("xid_errors", "xid_errors")
        # While active, a fatal last code keeps the finding: the Xid count only covers the window, the GPU
        # stays broken until it is reset.
        xid = new_xids is not None or (view.active and fatal)
        ecc = view.above("ecc_dbe_errors", "ecc_dbe_errors")
        if not xid and ecc is None:
            return None
        evidence: list[Evidence] = []
        parts: list[str] = []
        if new_xids is not None:
            evidence.append(new_xids)
        if xid:
            if code:
                evidence.append(Evidence("xid_last_code", float(code), ",".join(map(str, sorted(FATAL_XIDS))),
                                         view.window_s, "in" if fatal else "not in",
                                         view.signals.reasons.get("xid_last_code", "")))
            parts.append(f"fatal Xid {code}" if fatal else f"Xid {code}" if code else "Xid error (code unknown)")
        if ecc is not None:
            evidence.append(Evidence(ecc.signal, ecc.value, ecc.threshold, ecc.window_s, ">",
                                     "uncorrectable ECC errors since the driver loaded"))
            parts.append(f"{ecc.value:g} double-bit ECC error(s)")
        critical = (xid and fatal) or ecc is not None
        agreeing = int(xid and fatal) + int(ecc is not None)
        return Condition("GPU fault: " + " and ".join(parts), tuple(evidence), agreeing=max(1, agreeing),
                         considered=2, severity="critical" if critical else "warning",
                         details={"xid": float(code), "fatal": "yes" if critical else "no"})

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        escalate = Action("escalate", view.name, {"reason": condition.summary}, risk="low",
                          description="page a person: a GPU reset, reboot or replacement is their call")
        if condition.details.get("fatal") != "yes":
            return [escalate]
        return [
            Action("stop_routing", "router", {"engine": view.name}, inverse={"engine": view.name, "state": "active"},
                   risk="medium", description="drain the engine at the router: its GPU cannot be trusted"),
            escalate,
        ]


PLAYBOOK = GpuFault()

["mode", "cycles/round trip p50", "cycles/round trip p99", "µs/round trip p50", "exits/IPI", "ICR-write exits/IPI"],
["---", "---:", "---:", "---:", "---:", "---:"],
(.[].runs[]
 | [.vcpus[].phases[] | select(.name == "measure")] as $m
 | ($m | map(.guest.ipis_sent) | add) as $ipis
 | ($m | map(select(.latency)) | first | .latency) as $l
 | ["\(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi)",
    ($l.p50 | tostring), ($l.p99 | tostring), ($l.ns.p50 / 1000 | round | tostring),
    (($m | map(.kvm_stats.exits) | add) / $ipis * 100 | round / 100 | tostring),
    (($m | map(.icr_write_exits.exits) | add) / $ipis | tostring)])
| "| " + join(" | ") + " |"

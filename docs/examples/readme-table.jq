["mode", "cycles/round trip p50", "cycles/round trip p99", "µs/round trip p50", "exits/IPI", "ICR-write exits/IPI"],
["---", "---:", "---:", "---:", "---:", "---:"],
(.[].runs[]
 | .metrics as $m
 | ["\(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi)",
    ($m.cycles_per_operation_p50 | tostring), ($m.cycles_per_operation_p99 | tostring),
    ($m.ns_per_operation_p50 / 1000 | round | tostring),
    ($m.exits_per_ipi * 100 | round / 100 | tostring),
    ($m.icr_write_exits_per_ipi | tostring)])
| "| " + join(" | ") + " |"

"""Switch ECN marking: tc RED where the kernel has it, otherwise an eBPF phantom-queue marker."""

// Which instruction set runs: the best the CPU has, or the one CLIKA_KERNEL_ISA forces.
#pragma once

#include <string>

#include "kernel_api.h"

namespace clika_kernels {

struct IsaChoice {
  bool ok = false;
  Isa isa = Isa::kScalar;
  std::string message;  // why this ISA, or why none can run
};

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// Reads CLIKA_KERNEL_ISA (unset or "auto": the best supported); the result is computed once.
const IsaChoice& selected_isa();
// The engine for an ISA and precision, and a short description of what it computes with.
RangeKernel find_kernel(Isa isa, Precision precision);
const char* kernel_description(Isa isa, Precision precision);

}  // namespace clika_kernels

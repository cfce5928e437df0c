// Reference LayerNorm/RMSNorm on the CPU: float32 and float64, accumulated in float64.
#pragma once

#include "xpuruntime/norms.h"

namespace xrt::cpu {

void norm_forward(const NormForwardArgs& args);
void norm_backward(const NormBackwardArgs& args);

}  // namespace xrt::cpu

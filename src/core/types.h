/* types.h: small enums shared by the core's modules (scheduler, VRAM policy,
 * estimator) so that each header can include them without pulling in the rest. */
#ifndef GPUQ_CORE_TYPES_H
#define GPUQ_CORE_TYPES_H

enum sched_lane { SCHED_LANE_INTERACTIVE = 0, SCHED_LANE_BATCH = 1 };
enum sched_tier { SCHED_TIER_PAID = 0, SCHED_TIER_FREE = 1 };
/* Eviction priority: utility models (upscalers, background removal) go before
 * generation models (R24). */
enum model_class { MODEL_GENERATION = 0, MODEL_UTILITY = 1 };

#endif

// Placement is header-only (common/placement.h: inline, shared with device code); this file keeps
// the header compiled on its own in the common library.
#include "common/placement.h"

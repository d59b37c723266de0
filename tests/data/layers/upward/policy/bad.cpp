// An upward include: policy/ may not include session/.
#include "session/prefill.h"

#include "testutil.h"
int main(void) { return 77; /* skipped: not written yet */ }

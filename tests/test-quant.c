#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <nvfp4/quant.h>
int main(void) { return 0; }

#include "config.h"
#include <check.h>
#include <nvfp4/format.h>
#include "testutil.h"
START_TEST(test_placeholder_strerror)
{
    ck_assert_str_eq(nvfp4_strerror(NVFP4_ERR_OVERLAP), "overlapping tensors");
}
END_TEST
int main(void)
{
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_placeholder_strerror);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}

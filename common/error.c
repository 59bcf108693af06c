/* sel_strerror and sel_version: see include/selene/selene.h. */
#include "selene/selene.h"

#include <string.h>

#define SEL_STR2(x) #x
#define SEL_STR(x) SEL_STR2(x)

static const char *const sel_messages[] = {
	[SEL_EBADHEADER - SEL_ERROR_FIRST] = "record header is invalid",
	[SEL_ECHECKSUM - SEL_ERROR_FIRST] = "checksum mismatch",
	[SEL_EMISMATCH - SEL_ERROR_FIRST] =
		"identity, fingerprint, key or layout mismatch",
	[SEL_ELOCKED - SEL_ERROR_FIRST] =
		"record directory is locked by another process",
	[SEL_EGEOMETRY - SEL_ERROR_FIRST] = "invalid geometry",
	[SEL_ETOOBIG - SEL_ERROR_FIRST] = "size past its maximum",
	[SEL_EPROTO - SEL_ERROR_FIRST] = "protocol violation",
	[SEL_EQUEUEFULL - SEL_ERROR_FIRST] = "queue or pool full",
	[SEL_ESTOPPED - SEL_ERROR_FIRST] = "stopped after an earlier failure",
	[SEL_ENOTFOUND - SEL_ERROR_FIRST] = "no such record",
	[SEL_EFAILPOINT - SEL_ERROR_FIRST] = "malformed failpoint configuration",
};

const char *sel_strerror(int err)
{
	if (err == 0)
		return "success";
	if (err >= SEL_ERROR_FIRST && err <= SEL_ERROR_LAST)
		return sel_messages[err - SEL_ERROR_FIRST];
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *sel_version(void)
{
	return SEL_STR(SELENE_VERSION_MAJOR) "." SEL_STR(
		SELENE_VERSION_MINOR) "." SEL_STR(SELENE_VERSION_PATCH);
}

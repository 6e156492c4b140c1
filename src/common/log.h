/* log.h: one-line structured logging to stderr.
 * log_msg prints a JSON object {"ts":…,"level":…,"mod":…,"msg":…}; log_json
 * prints a caller-built JSON object (e.g. a routing decision) as one line.
 * Never pass secrets (API keys, tokens) to either. Thread-safe. */
#ifndef GPUQ_LOG_H
#define GPUQ_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_level(enum log_level lvl);
void log_msg(enum log_level lvl, const char *mod, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* log_json writes obj (a complete JSON object text) as one line. */
void log_json(const char *obj);

#define log_debug(mod, ...) log_msg(LOG_DEBUG, mod, __VA_ARGS__)
#define log_info(mod, ...) log_msg(LOG_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...) log_msg(LOG_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...) log_msg(LOG_ERROR, mod, __VA_ARGS__)

#endif

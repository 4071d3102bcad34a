" Plays a scenario (record.py writes it as JSON) in a real Vim with llama.vim loaded: each step's
" keys are fed as typed (feedkeys 't') on a timer at its time, counted from llama#enable(), so
" llama.vim's own timers (the ring's every 1000 ms, a blocked request's 100 ms retries) run on
" the same clock as the steps. The fake server records what llama.vim sends.
let s:steps = json_decode(join(readfile(g:scenario_path), "\n"))

function! s:feed(keys, timer) abort
    call feedkeys(a:keys, 't')
endfunction

function! s:log(event) abort
    " what happened when, for reading a recording against the port (not compared)
    call writefile([json_encode({'t': reltimefloat(reltime(s:t0)), 'event': a:event, 'mode': mode(),
        \ 'line': line('.'), 'col': col('.'), 'file': expand('%')})], g:events_path, 'a')
endfunction

function! s:start() abort
    let s:t0 = reltime()
    " Vim's rand() (llama.vim's random chunks) from a known seed, for the port to draw the same
    call test_srand_seed(g:rand_seed)
    " llama.vim's ring timer starts here (enable_at_startup off), on the steps' clock
    call llama#enable()
    for l:step in s:steps
        call timer_start(l:step.t, function('s:feed', [l:step.keys]))
    endfor
    augroup scenario_log
        autocmd!
        autocmd CursorMoved * call s:log('CursorMoved')
        autocmd CursorMovedI * call s:log('CursorMovedI')
        autocmd BufEnter * call s:log('BufEnter')
        autocmd BufLeave * call s:log('BufLeave')
        autocmd BufWritePost * call s:log('BufWritePost')
        autocmd TextYankPost * call s:log('TextYankPost')
        autocmd InsertEnter * call s:log('InsertEnter')
        autocmd InsertLeave * call s:log('InsertLeave')
    augroup END
endfunction

autocmd VimEnter * call s:start()
